"""The README's sample of `tether task` is what the command prints (issue 42: the sample had
drifted from the output: fields missing, another time format). Every line of the sample, field
and value, against a task made the way the README makes it; only the id and the times differ."""

from __future__ import annotations

import re

import pytest

from tests.support import REPO, CoordinatorProcess
from tests.tether.conftest import tether_here

_SAMPLE = re.compile(r"<!-- doc-test: output[^\n]*-->\n```\n\$ \.venv/bin/tether task (?P<prefix>\S+)\n"
                     r"(?P<lines>.*?)^```$", re.MULTILINE | re.DOTALL)
_VARYING = {"task", "queue deadline", "created", "updated"}  # the id and the times
# Local time with its offset; another day's (near midnight) with its date.
_TIME = re.compile(r"^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d [+-]\d\d:\d\d$")


def _fields(text: str) -> list[tuple[str, str]]:
    return [(line[:16].strip(), line[16:]) for line in text.splitlines()]


def test_the_readme_s_tether_task_sample_is_what_it_prints(coordinator: CoordinatorProcess,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    sample = _SAMPLE.search((REPO / "README.md").read_text())
    assert sample is not None, "the README's `tether task` sample"
    submitted = tether_here(coordinator, capsys, "submit", "--goal", "Turn on airplane mode", "--device", "phone-9",
                            "--queue-timeout", "600")  # as the README submits $WAITING
    assert submitted.code == 0, submitted
    task_id = submitted.out.strip()
    shown = tether_here(coordinator, capsys, "task", task_id[:len(sample["prefix"])])
    assert shown.code == 0, shown
    printed, written = _fields(shown.out), _fields(sample["lines"])
    assert [k for k, _ in printed] == [k for k, _ in written], (shown.out, sample["lines"])
    for (key, value), (_, sample_value) in zip(printed, written, strict=True):
        if key in _VARYING:
            assert (value == task_id and sample_value.startswith(sample["prefix"])) if key == "task" else \
                (_TIME.match(value) and _TIME.match(sample_value)), (key, value, sample_value)
        else:
            assert value == sample_value, (key, value, sample_value)
