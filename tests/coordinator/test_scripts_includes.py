"""Each script's calls resolve within its own include closure, and what the scripts share is written
once.

The library defines every include once, at its top (coordinator/state/scripts.py), so a script
that calls a helper without naming its include still runs: some other script named it. That
script's header would then lie about what it needs, and removing the other script's include line
would break it. These tests parse each script and each include together with the includes it
pulls in, transitively, and require every name it calls to be defined there, or to be one of
Lua's or Redis's builtins.
"""

from __future__ import annotations

import re
from pathlib import Path

from coordinator.state.scripts import lua_dir

_INCLUDE = re.compile(r'^--- @include "([\w/]+)"\s*$', re.MULTILINE)
# Comments first (a block comment may hold quotes), then string literals (they may hold what
# looks like a call), so only code is searched.
_BLOCK_COMMENT = re.compile(r"--\[(=*)\[.*?\]\1\]", re.DOTALL)
_LINE_COMMENT = re.compile(r"--[^\n]*")
_LONG_STRING = re.compile(r"\[(=*)\[.*?\]\1\]", re.DOTALL)
_SHORT_STRING = re.compile(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"")
# A call by a bare name: not a field's or a method's (`redis.call(`, `s:sub(`), not a definition.
_CALL = re.compile(r"(?<![\w.:])([A-Za-z_]\w*)\s*\(")
_FUNCTION_HEAD = re.compile(r"\bfunction\s*([\w.:]*)\s*\(([^)]*)\)")
_LOCALS = re.compile(r"\blocal\s+(?:function\s+(\w+)|([\w\s,]+?)\s*(?:=|$|\n))", re.MULTILINE)
_FOR_NAMES = re.compile(r"\bfor\s+([\w\s,]+?)\s+(?:in|=)")
_KEYWORDS = frozenset(["and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"])
# What the scripts may call without defining: Lua 5.1's base library as Redis offers it (its
# tables, such as string or cjson, are only ever called through a field, which is not searched).
BUILTINS = frozenset(["assert", "error", "getmetatable", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawset", "select", "setmetatable", "tonumber", "tostring", "type", "unpack", "xpcall"])


def code_of(text: str) -> str:
    """The Lua source without comments and string literals."""
    text = _BLOCK_COMMENT.sub(" ", text)
    text = _LINE_COMMENT.sub(" ", text)
    text = _LONG_STRING.sub(" ", text)
    return _SHORT_STRING.sub("''", text)


def closure(path: Path, root: Path) -> list[Path]:
    """The file and every include it pulls in, transitively, each once."""
    found: list[Path] = []
    pending = [path]
    while pending:
        current = pending.pop()
        if current in found:
            continue
        found.append(current)
        pending += [root / f"{name}.lua" for name in _INCLUDE.findall(current.read_text())]
    return found


def defined_names(code: str) -> set[str]:
    """Every name the code makes local: functions, variables, parameters, loop variables."""
    names: set[str] = set()
    for function, variables in _LOCALS.findall(code):
        names |= {function} if function else {v.strip() for v in variables.split(",")}
    for _, parameters in _FUNCTION_HEAD.findall(code):
        names |= {p.strip() for p in parameters.split(",") if p.strip() not in ("", "...")}
    for variables in _FOR_NAMES.findall(code):
        names |= {v.strip() for v in variables.split(",")}
    return names


def called_names(code: str) -> set[str]:
    called = set(_CALL.findall(code)) - _KEYWORDS
    definitions = {head.rsplit(".", 1)[-1] for head, _ in _FUNCTION_HEAD.findall(code) if head}
    # `local function f(` is a definition, not a call; a later call of f is still found.
    calls_after_definitions = set(_CALL.findall(_FUNCTION_HEAD.sub("function()", code))) - _KEYWORDS
    return (called - definitions) | calls_after_definitions


def unresolved_calls(path: Path, root: Path) -> set[str]:
    """The names ``path`` calls that neither its closure defines nor Lua or Redis provides."""
    files = closure(path, root)
    defined = set().union(*(defined_names(code_of(f.read_text())) for f in files))
    return called_names(code_of(path.read_text())) - defined - BUILTINS


def _every_lua_file(root: Path) -> list[Path]:
    return sorted(root.glob("*.lua")) + sorted((root / "includes").glob("*.lua"))


def test_every_script_and_include_calls_only_what_its_include_closure_defines() -> None:
    root = lua_dir()
    unresolved = {path.relative_to(root).as_posix(): names
                  for path in _every_lua_file(root) if (names := unresolved_calls(path, root))}
    assert unresolved == {}


def test_the_checker_finds_real_calls_in_the_real_scripts() -> None:
    """Guards the patterns: a checker that found no calls would pass everything."""
    root = lua_dir()
    created = called_names(code_of((root / "createTask-1.lua").read_text()))
    assert {"deployment", "setActor", "findIdempotent", "startTask", "waitingCandidates"} <= created
    assert "call" not in created and "decode" not in created  # redis.call, cjson.decode: fields


def _write(root: Path, name: str, text: str) -> Path:
    path = root / f"{name}.lua"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_script_that_forgets_an_include_is_caught(tmp_path: Path) -> None:
    _write(tmp_path, "includes/a", "local function fromA(x)\n  return tostring(x)\nend\n")
    _write(tmp_path, "includes/b", '--- @include "includes/a"\nlocal function fromB() return fromA(1) end\n')
    # Names only b, which pulls in a: both resolve.
    good = _write(tmp_path, "good-0", '--[[ fromC() in a comment ]]\n--- @include "includes/b"\n'
                                      "local s = 'fromD()'\nreturn fromB() .. fromA(2) .. redis.call('TIME')\n")
    # Names nothing: fromA is defined in the library (by b's include), but not for this script.
    forgot = _write(tmp_path, "forgot-0", "local function own() return 1 end\nreturn fromA(own())\n")
    # An include that calls a helper of another include it does not name.
    lazy = _write(tmp_path, "includes/lazy", "local function fromLazy() return fromB() end\n")
    typo = _write(tmp_path, "typo-0", '--- @include "includes/a"\nreturn fromAA(1)\n')
    assert unresolved_calls(good, tmp_path) == set()
    assert unresolved_calls(forgot, tmp_path) == {"fromA"}
    assert unresolved_calls(lazy, tmp_path) == {"fromB"}
    assert unresolved_calls(typo, tmp_path) == {"fromAA"}


def test_parameters_locals_and_loop_variables_resolve(tmp_path: Path) -> None:
    script = _write(tmp_path, "calls-0", (
        "local function sweep(act, limit)\n"
        "  for i, each in ipairs({}) do each(i) end\n"
        "  local later = function(x) return x end\n"
        "  return act(limit) + later(1)\n"
        "end\n"
        "return sweep(function(n) return n end, select('#', 1))\n"))
    assert unresolved_calls(script, tmp_path) == set()


def test_the_revoked_credential_check_is_written_once() -> None:
    """Every host script asks includes/common.lua's ``credentialRevoked``; none asks the set of
    revoked digests itself, so the scripts cannot come to disagree on what revoked means."""
    root = lua_dir()
    asked = {path.relative_to(root).as_posix(): len(re.findall(r"'SISMEMBER',\s*[\w.]*revoked", text))
             for path in _every_lua_file(root)
             if (text := _LINE_COMMENT.sub(" ", _BLOCK_COMMENT.sub(" ", path.read_text())))}
    assert {name: n for name, n in asked.items() if n} == {"includes/common.lua": 1}
    callers = {path.name for path in _every_lua_file(root) if "credentialRevoked(" in code_of(path.read_text())}
    assert {"claimAssignment-1.lua", "heartbeat-1.lua", "enrollDevices-1.lua", "common.lua"} <= callers
