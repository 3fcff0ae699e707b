"""The wire vocabulary is defined once (``wire``); the Lua side mirrors it, and these tests keep
the two equal."""

from __future__ import annotations

import re

import wire
from coordinator.errors import ScriptError, error_for
from coordinator.keys import STATUS_CODES, STATUS_SPAN
from coordinator.scripts import lua_dir

_STATUS_LITERAL = re.compile(r"status\s*(?:==|~=|=)\s*'([a-z_]+)'")


def _lua_sources() -> str:
    return "\n".join(p.read_text() for p in sorted(lua_dir().rglob("*.lua")))


def test_every_status_the_scripts_write_or_compare_is_a_wire_status() -> None:
    used = set(_STATUS_LITERAL.findall(_lua_sources()))
    known = set(wire.values(wire.TaskStatus)) | set(wire.values(wire.DeviceStatus))
    assert used, "the pattern no longer finds the scripts' status literals"
    assert used <= known, used - known


def test_every_script_failure_answers_a_contract_error_code() -> None:
    codes = set(wire.values(wire.ErrorCode))
    for failure in ScriptError:
        assert error_for(failure.value, "d-1").code in codes, failure


def test_the_id_grammar_is_the_contracts() -> None:
    assert wire.is_valid_id("A-z.0_9:x" * 14) and len("A-z.0_9:x" * 14) == 126
    for bad in ("", "x" * 129, "a b", "a/b", "é", None, 7):
        assert not wire.is_valid_id(bad)


_TASK_EVENT = re.compile(r"(?:taskEvent\(S, task, |requeueTask\(S, task, now, )'([a-z_]+)'")
_FEED_EVENT = re.compile(r"(?:publish\(S, \{type = |\{\s*type = )'([a-z_]+)'")
_KEPT = re.compile(r"^local (\w+_KEPT) = (\d+)$", re.MULTILINE)


def test_every_event_the_scripts_write_is_a_wire_event_type() -> None:
    sources = _lua_sources()
    written = set(_TASK_EVENT.findall(sources)) | set(_FEED_EVENT.findall(sources))
    # unassignTask writes "unassigned" through requeueTask; the feed's host and device events
    assert {"created", "assigned", "claimed", "requeued", "host_online", "device_disabled"} <= written
    assert written <= set(wire.values(wire.EventType)), written - set(wire.values(wire.EventType))


def test_what_the_scripts_keep_is_what_wire_says() -> None:
    kept = {name: int(value) for name, value in _KEPT.findall(_lua_sources())}
    assert kept == {"TASK_EVENTS_KEPT": wire.TASK_EVENTS_KEPT, "DEVICE_RUNS_KEPT": wire.DEVICE_RUNS_KEPT,
                    "FEED_EVENTS_KEPT": wire.FEED_EVENTS_KEPT}


_STATUS_CODES = re.compile(r"^local STATUS_CODES = \{(.*)\}$", re.MULTILINE)
_STATUS_SPAN = re.compile(r"^local STATUS_SPAN = (\d+)$", re.MULTILINE)


def test_the_status_index_scores_are_the_same_on_both_sides() -> None:
    """Listings read the score ranges the scripts write: a status code or span that differed
    would hide tasks from every listing."""
    sources = _lua_sources()
    (codes,) = _STATUS_CODES.findall(sources)
    lua_codes = {name: int(code) for name, code in re.findall(r"(\w+) = (\d+)", codes)}
    assert lua_codes == STATUS_CODES
    assert set(STATUS_CODES) == set(wire.values(wire.TaskStatus))
    assert [int(span) for span in _STATUS_SPAN.findall(sources)] == [STATUS_SPAN]
