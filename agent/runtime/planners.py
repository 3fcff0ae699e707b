"""The deterministic ``scripted`` planner, and ``make_planner`` to pick one from settings.

The scripted planner needs no network: a few rules over the observed UI tree reach the goals
used in demos and tests on the sim phone ("Turn on airplane mode", "Turn off Wi-Fi",
"Write a note saying hello world"). Each turn it looks at the screen afresh, so it recovers from
a screen it did not expect, and it verifies the result on screen before it says ``done``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import httpx

from .actions import Action
from .driver import Observation, UINode
from .openai_planner import OpenAIPlanner
from .task import Planner, StepRecord

_TOGGLE_NAMES = {
    "airplane mode": "Airplane mode",
    "aeroplane mode": "Airplane mode",
    "flight mode": "Airplane mode",
    "wifi": "Wi-Fi",
    "wi-fi": "Wi-Fi",
    "bluetooth": "Bluetooth",
}
_WHAT = r"(?P<what>airplane mode|aeroplane mode|flight mode|wi-?fi|bluetooth)"
_TOGGLE_GOALS = (
    re.compile(rf"(?:turn|switch|set)\s+(?P<state>on|off)\s+(?:the\s+)?{_WHAT}", re.I),
    re.compile(rf"(?:turn|switch|set)\s+(?:the\s+)?{_WHAT}\s+(?P<state>on|off)", re.I),
    re.compile(rf"(?P<state>enable|disable)\s+(?:the\s+)?{_WHAT}", re.I),
)
_NOTE_GOAL = re.compile(
    r"(?:write|create|add|take|make)\s+(?:a\s+)?note\s+(?:saying|that says|with(?:\s+the)?\s+text|reading)?\s*:?\s*"
    r"(?P<q>[\"']?)(?P<text>.+?)(?P=q)",
    re.I | re.S,
)
_ENDING = r"\s*[.!]?\s*"


class ScriptedPlanner:
    name = "scripted"  # HOST_AGENT_PLANNER, and what the heartbeat's capabilities list

    async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
        goal = goal.strip()
        for pattern in _TOGGLE_GOALS:
            match = re.fullmatch(pattern.pattern + _ENDING, goal, pattern.flags)
            if match:
                label = _TOGGLE_NAMES[match["what"].lower()]
                want = match["state"].lower() in ("on", "enable")
                return _toggle(label, want, observation, history)
        match = re.fullmatch(_NOTE_GOAL.pattern + _ENDING, goal, _NOTE_GOAL.flags)
        if match:
            return _note(match["text"], observation, history)
        return Action("fail", reason="planner_cannot_plan")

    async def aclose(self) -> None:
        pass


def _toggle(label: str, want: bool, observation: Observation, history: Sequence[StepRecord]) -> Action:
    row = next(
        (n for n in observation.nodes() if n["text"] == label and n["clickable"] and n["checked"] is not None),
        None,
    )
    if row is None:
        if _count(history, "launch", app="settings") >= 2:
            return Action("fail", reason="toggle_not_found")
        return Action("launch", app="settings")
    if row["checked"] == want:
        return Action("done", reason=f"{label} is {'on' if want else 'off'}")
    if _count(history, "tap", selector=label) >= 2:
        return Action("fail", reason="toggle_unresponsive")
    return Action("tap", selector=label)


def _note(text: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
    # Done only when this run saved it: an identical older note proves nothing.
    saved = any(_is(n, "note") and n["text"] == text for n in observation.nodes())
    if saved and _count(history, "tap", selector="Save"):
        return Action("done", reason="note saved")
    editor = next((n for n in observation.nodes() if _is(n, "editor")), None)
    if editor is None:
        if _count(history, "launch", app="notes") >= 2:
            return Action("fail", reason="notes_not_found")
        return Action("launch", app="notes")
    if editor["text"] == text:
        if _count(history, "tap", selector="Save") >= 2:
            return Action("fail", reason="note_not_saved")
        return Action("tap", selector="Save")
    if editor["text"]:
        return Action("fail", reason="editor_not_empty")
    if not editor["focused"]:
        return Action("tap", selector=editor["resource_id"])
    return Action("type", text=text)


def _is(node: UINode, name: str) -> bool:
    return node["resource_id"].endswith(f":id/{name}")


def _count(history: Sequence[StepRecord], kind: str, **fields: str) -> int:
    return sum(
        1
        for step in history
        if step.action is not None
        and step.action.kind == kind
        and all(getattr(step.action, key) == value for key, value in fields.items())
    )


def make_planner(
    kind: str,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Planner:
    """``HOST_AGENT_PLANNER``: "scripted", or "openai" (needs base URL and model; the key may be
    empty for local servers). The caller closes the planner with ``aclose()``."""
    if kind == "scripted":
        return ScriptedPlanner()
    if kind == "openai":
        if not base_url or not model:
            raise ValueError("the openai planner needs HOST_AGENT_LLM_BASE_URL and HOST_AGENT_LLM_MODEL")
        return OpenAIPlanner(base_url, model, api_key or "", transport=transport)
    raise ValueError(f"unknown planner {kind!r}: use 'scripted' or 'openai'")
