"""One vocabulary for the dashboard (no browser needed): its modules import the contract's
statuses, reasons, event types and error codes from ``/ui/wire.js`` (written from ``wire``), and
none spells one as a string literal. A literal that only looks like one (a session command's
``pending``, a ``candidates`` count's name) says so on its line: ``// not wire: why``."""

from __future__ import annotations

import re
from enum import Enum
from importlib import resources

from hypothesis import given
from hypothesis import strategies as st

import wire

# The sets whose words the dashboard must not restate.
WORDS: dict[str, tuple[str, ...]] = {
    **{enum.__name__: wire.values(enum) for enum in (
        wire.TaskStatus, wire.ResultStatus, wire.RunStatus, wire.DeviceStatus, wire.DeliveryState,
        wire.WaitingReason, wire.EventType, wire.ErrorCode)},
    "SESSION_END_REASONS": wire.SESSION_END_REASONS,
}
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`(?:[^`\\]|\\.)*`|//[^\n]*|/\*.*?\*/', re.DOTALL)
_EXEMPT = re.compile(r"//.*\bnot wire: \S")


def _interpolations(template: str) -> list[str]:
    """The expressions inside a template literal's ``${…}`` (braces counted, so nested ones stay)."""
    found, depth, start = [], 0, 0
    i = 0
    while i < len(template):
        if depth == 0 and template.startswith("${", i):
            depth, start, i = 1, i + 2, i + 2
            continue
        if depth:
            depth += {"{": 1, "}": -1}.get(template[i], 0)
            if depth == 0:
                found.append(template[start:i])
        i += 1
    return found


def literals(source: str, line: int = 1) -> list[tuple[int, str]]:
    """Each string literal of JavaScript ``source`` (comments skipped) with its line number."""
    found: list[tuple[int, str]] = []
    for match in _TOKEN.finditer(source):
        token, at = match.group(), line + source.count("\n", 0, match.start())
        if token.startswith(("//", "/*")):
            continue
        if token.startswith("`"):
            inner = token[1:-1]
            for expression in _interpolations(inner):
                found += literals(expression, at + inner[:inner.index(expression)].count("\n"))
            if "${" in inner:
                continue
        found.append((at, token[1:-1]))
    return found


def restated(name: str, source: str) -> list[str]:
    words: dict[str, str] = {}
    for kind, values in WORDS.items():
        for word in values:
            words.setdefault(word, kind)
    lines = source.splitlines()
    return [f"{name}:{at}: {text!r} is wire.{words[text]}'s"
            for at, text in literals(source) if text in words and not _EXEMPT.search(lines[at - 1])]


def test_no_dashboard_module_restates_wire_vocabulary() -> None:
    modules = [entry for entry in resources.files("coordinator.ui").iterdir() if entry.name.endswith(".js")]
    assert modules
    found = [line for module in modules for line in restated(module.name, module.read_text())]
    assert found == [], "import these from ./wire.js instead:\n" + "\n".join(found)


def test_the_check_finds_a_word_however_it_is_quoted() -> None:
    source = ('const a = "queued";\n// "failed" in a comment\nconst b = `x ${s === \'lease_expired\' ? "y" : ""}`;\n'
              "const c = `no_matching_device`;\nconst d = \"pending\"; // not wire: a command's status\n")
    assert [line.split(": ", 1)[0] for line in restated("m.js", source)] == ["m.js:1", "m.js:3", "m.js:4"]


_ALL_WORDS = sorted({word for values in WORDS.values() for word in values})
_QUOTED = ['"{}"', "'{}'", "`{}`", '`a ${{x === "{}" ? 1 : 2}} b`']


@given(st.sampled_from(_ALL_WORDS), st.sampled_from(_QUOTED), st.integers(0, 3))
def test_any_wire_word_in_any_quotes_is_found_and_never_in_a_comment(word: str, quoted: str, blank: int) -> None:
    source = "\n" * blank + f"const x = {quoted.format(word)}; // {word!r}\n/* '{word}' */\n"
    assert [line.split(": ", 1)[0] for line in restated("m.js", source)] == [f"m.js:{blank + 1}"]


def test_every_enum_of_wire_is_checked_or_deliberately_not() -> None:
    # Scopes, kinds, outcomes and webhook events are words of HTML too ("submit") or not shown;
    # wire.js still serves them (tests/browser/test_assets.py).
    unchecked = {"OperatorScope", "TaskKind", "ProgressOutcome", "WebhookEvent"}
    enums = {name for name, value in vars(wire).items() if isinstance(value, type) and issubclass(value, Enum)
             and value.__module__ == wire.__name__}
    assert enums - unchecked == set(WORDS) - {"SESSION_END_REASONS"}
