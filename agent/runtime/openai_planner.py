"""A planner backed by any OpenAI-compatible chat-completions endpoint.

Each turn sends the goal, the screen's text, a compact list of the elements one can tap and the
steps so far (never a screenshot: text is cheap, and a screen may show private data we do not
need to ship), and asks for one JSON action. Anything unusable (HTTP error, a reply that is not
an action) is a ``PlannerError``: one failed turn, which the task runner counts.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

from .actions import PLANNER_ACTIONS, Action, parse_action
from .driver import Observation, centre, iter_nodes
from .errors import ActionError, PlannerError
from .task import StepRecord

logger = logging.getLogger(__name__)

MAX_SCREEN_CHARS = 4000
MAX_ELEMENTS = 60
MAX_HISTORY = 15
# Models can take a while to answer; a server that does not accept the connection is just down.
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)

SYSTEM_PROMPT = """You operate an Android phone to reach a goal. Each turn you get the goal, the \
text on the screen, the elements you can tap and the steps taken so far. Reply with exactly one \
JSON object, the next action, and nothing else. Actions:
{"action": "tap", "text": "<element text>"}  or  {"action": "tap", "id": "<resource id>"}
{"action": "tap", "x": 540, "y": 960}  (a point, when the element has no text or id)
{"action": "type", "text": "..."}  (types into the focused field: tap the field first)
{"action": "swipe", "x1": 540, "y1": 1500, "x2": 540, "y2": 500, "duration_ms": 300}
{"action": "key", "key": "home" | "back" | "enter"}
{"action": "launch", "app": "settings"}
{"action": "wait", "ms": 1000}
{"action": "done", "reason": "..."}  once the screen shows the goal is reached
{"action": "fail", "reason": "..."}  if the goal cannot be reached"""


class OpenAIPlanner(AbstractAsyncContextManager["OpenAIPlanner"]):
    name = "openai"  # HOST_AGENT_PLANNER, and what the heartbeat's capabilities list

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        # Local servers (llama.cpp, Ollama) need no key; send no header rather than "Bearer ".
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"OpenAIPlanner(base_url={self.base_url!r}, model={self.model!r})"  # never the key

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": build_prompt(goal, observation, history)},
            ],
        }
        try:
            response = await self._client.post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            # The exception text names the URL at most; the key lives only in a header.
            raise PlannerError(f"request failed: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise PlannerError(f"HTTP {response.status_code} from the model server")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError):
            raise PlannerError("the model server's reply is not a chat completion") from None
        if not isinstance(content, str):
            raise PlannerError("the model's reply has no text")
        try:
            return parse_reply(content)
        except PlannerError as exc:
            logger.info("unusable model reply (%s): %.200r", exc, content)
            raise


def parse_reply(content: str) -> Action:
    """The action in a model reply: bare JSON, JSON in a ```json fence, or JSON amid prose."""
    fenced = _FENCE.search(content)
    candidate = (fenced[1] if fenced else content).strip()
    data: Any
    try:
        data = json.loads(candidate)
    except ValueError:
        start, end = candidate.find("{"), candidate.rfind("}")
        if start < 0 or end <= start:
            raise PlannerError("the model's reply holds no JSON object") from None
        try:
            data = json.loads(candidate[start : end + 1])
        except ValueError:
            raise PlannerError("the model's reply holds no valid JSON object") from None
    try:
        return parse_action(data, allowed=PLANNER_ACTIONS)
    except ActionError as exc:
        raise PlannerError(f"the model's reply is not a valid action: {exc}") from None


def build_prompt(goal: str, observation: Observation, history: Sequence[StepRecord]) -> str:
    screen = observation.text
    if len(screen) > MAX_SCREEN_CHARS:
        screen = screen[:MAX_SCREEN_CHARS] + "\n..."
    elements = []
    for node in iter_nodes(observation.tree):
        if not (node["clickable"] or node["focused"]):
            continue
        x, y = centre(node["bounds"])
        parts = [json.dumps(node["text"][:80]) if node["text"] else "(no text)"]
        if node["resource_id"]:
            parts.append(f"id={node['resource_id']}")
        parts.append(f"at ({x}, {y})")
        if node["checked"] is not None:
            parts.append(f"checked={'true' if node['checked'] else 'false'}")
        if node["focused"]:
            parts.append("focused")
        elements.append("- " + " ".join(parts))
        if len(elements) >= MAX_ELEMENTS:
            break
    steps = [
        f"{step.index + 1}. {step.summary} ({'ok' if step.ok else 'failed: ' + (step.error or '')})"
        for step in history[-MAX_HISTORY:]
    ]
    return "\n".join(
        [
            f"Goal: {goal}",
            "",
            "Screen text:",
            screen or "(empty)",
            "",
            "Elements:",
            *(elements or ["(none)"]),
            "",
            "Steps so far:",
            *(steps or ["(none)"]),
        ]
    )
