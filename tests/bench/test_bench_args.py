"""The benchmark command's own arguments: what it hands wrk, and when it exits non-zero."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import ab
from bench.context import PRESETS
from bench.report import Row
from bench.wrk import wrk_args


def _duration(args: list[str]) -> str:
    return args[args.index("-d") + 1]


@given(st.floats(min_value=0.001, max_value=3600, allow_nan=False))
def test_wrk_is_given_whole_seconds_never_shorter_than_asked(seconds: float) -> None:
    duration = _duration(wrk_args(8080, Path("s.lua"), 2, 64, seconds))
    assert duration.endswith("s") and duration[:-1].isdigit()
    assert int(duration[:-1]) >= max(1, math.ceil(seconds))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_window_of_every_preset_builds_a_wrk_command_wrk_accepts(preset: str) -> None:
    # The windows the scenarios cut from a preset: whole ones, halves (artifacts), and shares of
    # the lifecycle window among its rounds (scenarios.py); `full`'s 7.5 s once crashed wrk.
    p = PRESETS[preset]
    windows = [v for f in dataclasses.fields(p) if f.name.endswith("_s") for v in [getattr(p, f.name)]]
    windows += [p.lifecycle_s / 2, p.lifecycle_s / 3, p.lifecycle_s / 4]
    for seconds in windows:
        assert _duration(wrk_args(8080, Path("s.lua"), 2, 64, seconds))[:-1].isdigit(), seconds


def test_ab_compares_a_rows_ratio_to_the_floor_and_else_its_result() -> None:
    row = Row("2w", "renew", "10,839 req/s, p50 5.37 ms", "1.62 x floor", ">= 0.8 x floor", "met", "")
    assert ab.row_value(row) == 1.62
    assert ab.row_value(dataclasses.replace(row, ratio="")) == 10839
    assert ab.row_value(dataclasses.replace(row, ratio="", result="n/a")) is None


def test_ab_refuses_an_unknown_scenario_and_zero_turns() -> None:
    with pytest.raises(SystemExit):
        ab.parse(["HEAD", "--only", "nonesuch"])
    with pytest.raises(SystemExit):
        ab.parse(["HEAD", "--turns", "0"])
    assert ab.parse(["HEAD~1"]).only == "calls,lifecycle"


def test_peers_refuses_an_unknown_peer_and_zero_turns() -> None:
    from bench.peers.__main__ import parse

    with pytest.raises(SystemExit):
        parse(["--only", "saq,nonesuch"])
    with pytest.raises(SystemExit):
        parse(["--turns", "0"])
    assert parse(["--only", "saq,tether", "--turns", "2"]).names == ["saq", "tether"]
    # the floor column runs Tether's own module: its workers are Tether's hosts (issue 56)
    assert parse(["--only", "saq,tether,tether-floor"]).names == ["saq", "tether", "tether-floor"]
    assert parse(["worker", "tether-floor", "tb01", "0"]).worker[1] == "tether-floor"


def test_help_lists_each_usage_on_its_own_line_and_the_docs_are_written_only_when_asked() -> None:
    # Issue 58: `bench --preset small` rewrote docs/benchmarks.md, leaving a fresh clone dirty,
    # and its --help ran both usages into one paragraph.
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True, text=True, check=True,
                           timeout=60).stdout
    lines = [line.strip() for line in shown.splitlines()]
    assert lines[0] == "usage:"
    assert lines[1].startswith("python -m bench [--preset small|full]") and "[--write-docs]" in lines[1]
    assert lines[2].startswith("python -m bench ab REF")
    assert "--no-docs" not in shown and "rewrite docs/benchmarks.md" in shown
