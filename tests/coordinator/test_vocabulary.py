"""The wire vocabulary is defined once (``wire``); the Lua side mirrors it, and these tests keep
the two equal."""

from __future__ import annotations

import re

import pytest

import wire
from coordinator.errors import ApiError, ScriptError, error_for
from coordinator.state.keys import STATUS_CODES, STATUS_SPAN
from coordinator.state.scripts import lua_constants, lua_dir
from coordinator.state.store import Store

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


_LOCAL = re.compile(r"^local (\w+)\b", re.MULTILINE)


def test_no_script_defines_what_is_generated_from_python() -> None:
    """The failure codes, what is kept, the status index's scores, a host's flag bits, the names
    of a waiting task's counts, the terminal statuses and the default team reach the scripts from
    Python as the library loads (``lua_constants``); a script defining its own would shadow them."""
    generated = set(_LOCAL.findall(lua_constants()))
    assert {"E", "TASK_EVENTS_KEPT", "DEVICE_RUNS_KEPT", "FEED_EVENTS_KEPT", "STATUS_CODES", "STATUS_SPAN",
            "HOST_FLAGS", "CANDIDATE_COUNTS", "PRIORITY_MAX", "TERMINAL_STATUSES", "DEFAULT_TEAM",
            "SESSION_COMMANDS_KEPT"} <= generated
    assert generated.isdisjoint(_LOCAL.findall(_lua_sources()))
    assert f"local DEFAULT_TEAM = '{wire.DEFAULT_TEAM}'" in lua_constants()
    assert "local TERMINAL_STATUSES = {cancelled = true, failed = true, succeeded = true}" in lua_constants()


@pytest.mark.anyio
async def test_the_scripts_answer_the_failure_codes_and_scores_python_defines(store: Store) -> None:
    """Through the scripts themselves: a failure comes back as ScriptError's code (mapped to the
    contract's error), and a task is scored in the status index as Keys reads it."""
    with pytest.raises(ApiError) as refused:
        await store.cancel_task("t_missing")
    assert refused.value.code == error_for(ScriptError.NOT_FOUND.value, "t_missing").code
    created = await store.create_task({"id": "t_1", "kind": "goal", "goal": "g", "max_steps": 1,
                                       "max_attempts": 1, "queue_timeout_ms": 60_000, "target_device": "d1"})
    score = await store.redis.zscore(store.keys.tasks_by_status, "t_1")
    assert score == STATUS_CODES["queued"] * STATUS_SPAN + created.task.seq
