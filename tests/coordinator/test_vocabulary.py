"""The wire vocabulary is defined once (``wire``); the Lua side mirrors it, and these tests keep
the two equal."""

from __future__ import annotations

import re

import wire
from coordinator.errors import ScriptError, error_for
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
