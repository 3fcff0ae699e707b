"""Run files read as hostile input (``tether run submit FILE``, tether/run_files.py): a YAML bomb,
and values JSON cannot hold, are one line on stderr and exit 2, before any request is sent and
without a traceback or a memory blow-up."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import child_env
from tether.run_files import MAX_ALIASES, RunFileError, parse_run_file

# The classic "billion laughs": 438 bytes naming 10^9 strings through 90 aliases.
BILLION_LAUGHS = "\n".join([
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    *(f"{b}: &{b} [*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)),
    "name: *i",
]) + "\n"

# Aliases within the bound, each doubling what the one before names: 2^60 values once expanded.
DOUBLINGS = "a0: &a0 [x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 40)) + "name: *a39\n"

NOT_JSON_YAML = {
    "a date": "name: 2026-01-01\n",
    "a timestamp": "name: 2026-01-01T10:00:00Z\n",
    "binary": "name: !!binary aGVsbG8=\n",
    "a set": "name: !!set {a, b}\n",
    "an ordered map": "name: !!omap [{a: 1}]\n",
    "nan": "name: .nan\n",
    "infinity": "tasks: [{max_steps: -.inf}]\n",
    "a number as a key": "tasks: [{1: goal}]\n",
    "a null key": "{~: x}\n",
    "too many aliases": "a: &a x\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n",
    "a bomb": BILLION_LAUGHS,
    "aliases that double": DOUBLINGS,
    "nested too deeply": "a: " + "[" * 100_000 + "\n",
}

NOT_JSON_JSON = {
    "NaN": '{"name": NaN}',
    "Infinity": '{"tasks": [{"max_steps": -Infinity}]}',
    "nested too deeply": "[" * 100_000,
}


@pytest.mark.parametrize("text", NOT_JSON_YAML.values(), ids=NOT_JSON_YAML.keys())
def test_a_yaml_value_json_cannot_hold_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(RunFileError) as refused:
        parse_run_file(text, as_yaml=True)
    assert "\n" not in str(refused.value) and str(refused.value)


@pytest.mark.parametrize("text", NOT_JSON_JSON.values(), ids=NOT_JSON_JSON.keys())
def test_a_json_value_json_cannot_hold_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(RunFileError) as refused:
        parse_run_file(text, as_yaml=False)
    assert "\n" not in str(refused.value) and str(refused.value)


def test_a_run_file_with_a_few_aliases_and_quoted_dates_is_read_as_written() -> None:
    text = ("params: &p {lang: de, when: '2026-01-01'}\nname: nightly\nmatrix:\n  work:\n"
            "    - {kind: workflow, workflow: {name: a, params: *p}}\n"
            "    - {kind: workflow, workflow: {name: b, params: *p}}\n  devices: {driver: sim}\n")
    body = parse_run_file(text, as_yaml=True)
    assert body["matrix"]["work"][1]["workflow"]["params"] == {"lang": "de", "when": "2026-01-01"}
    assert parse_run_file('{"name": "n", "tasks": [], "x": 1.5}', as_yaml=False)["x"] == 1.5


def _limit_memory() -> None:
    # 1 GiB of address space: before the loader bounded aliases, the bomb took 1.5 GB, so the test
    # fails (MemoryError) instead of taking the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


CLI_FILES = {"run.yaml": NOT_JSON_YAML, "run.json": NOT_JSON_JSON}
CLI_CASES = [("run.yaml", kind) for kind in ("a bomb", "a date", "nan", "a set", "binary")] + [("run.json", "NaN")]


@pytest.mark.parametrize(("name", "kind"), CLI_CASES)
def test_tether_run_submit_refuses_such_a_file_in_one_line_and_exit_2(tmp_path: Path, name: str, kind: str) -> None:
    path = tmp_path / name
    path.write_text(CLI_FILES[name][kind])
    # Port 9 (discard) answers nothing: the file is refused before any request is sent.
    env = child_env(TETHER_URL="http://127.0.0.1:9", TETHER_TOKEN="unused")
    done = subprocess.run([sys.executable, "-m", "tether", "run", "submit", str(path)], env=env,
                          capture_output=True, text=True, timeout=30, check=False, preexec_fn=_limit_memory)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{path} is not {'YAML' if name == 'run.yaml' else 'JSON'}" in done.stderr and done.stdout == ""
