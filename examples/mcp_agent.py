"""An agent that drives a pooled phone through Tether's /mcp, as an LLM agent would, with a
scripted planner in the model's place (no network beyond the coordinator, no model).

It connects with the official MCP SDK's client (Streamable HTTP, the operator token as its bearer),
finds a free sim phone (``list_devices``), starts a live session on it (``start_session``), and
then loops: look at the screen's elements, decide the next action, act (``tap`` by element or by
text, ``press_key``, ``launch_app``, ``type_text``), printing each step, until its goal holds:
Airplane mode on, and a note saying so. Then it ends the session (``end_session``).

    TETHER_URL=http://127.0.0.1:8000 TETHER_TOKEN=… .venv/bin/python examples/mcp_agent.py

A model in the planner's place reads the same answers: the screen as an image, and the elements
one a line (``[3] "Airplane mode" id=settings:id/airplane bounds=0,200,1080,360 clickable``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

NOTE = "Airplane mode is on"
MAX_STEPS = 20


@dataclass
class Step:
    tool: str
    arguments: dict[str, Any]
    why: str


@dataclass
class ScriptedPlanner:
    """Decides the next step from the screen's elements alone, as a model would from the same
    text: the goal is Airplane mode on, then a note saying so."""

    airplane_on: bool = False
    noted: bool = False
    editing: bool = False

    def next(self, elements: list[Mapping[str, Any]]) -> Step | None:
        def find(*, text: str | None = None, ident: str | None = None) -> int | None:
            for index, element in enumerate(elements):
                if (text is not None and element.get("text") == text) or \
                        (ident is not None and element.get("id") == ident):
                    return index
            return None

        airplane = find(text="Airplane mode")
        switch = find(ident="settings:id/airplane_mode_switch")
        if not self.airplane_on:
            if airplane is not None and switch is not None:
                if elements[switch].get("text") == "On":
                    self.airplane_on = True
                    return Step("press_key", {"key": "home"}, "Airplane mode is on; back to the home screen")
                return Step("tap", {"element": airplane}, f'tap [{airplane}] "Airplane mode" to turn it on')
            settings = find(ident="home:id/app_settings")
            if settings is not None:
                return Step("tap", {"element": settings}, f'tap [{settings}] "Settings" on the home screen')
            return Step("press_key", {"key": "home"}, "not where Settings is: go home")
        if self.noted:
            return None
        if any(e.get("id") == "notes:id/note" and e.get("text") == NOTE for e in elements):
            self.noted = True
            return None
        editor = find(ident="notes:id/editor")
        if editor is None:
            return Step("launch_app", {"app": "notes"}, "open Notes to write it down")
        if elements[editor].get("text") != NOTE:
            if not self.editing:
                self.editing = True
                return Step("tap", {"element": editor}, f"tap [{editor}] the editor to type in it")
            return Step("type_text", {"text": NOTE}, "type the note")
        return Step("tap", {"text": "Save"}, "save the note (tap by text)")


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def _call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {_text(result)}")
    return dict(result.structured_content or {})


def _elements(answer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    observation = answer.get("observation") or {}
    return list(observation.get("elements") or [])


async def run(url: str, token: str, driver: str, wait_s: int) -> int:
    headers = {"authorization": f"Bearer {token}"}
    async with (httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=180)) as http,
                streamable_http_client(url.rstrip("/") + "/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        devices = (await _call(session, "list_devices", {"driver": driver, "free_only": True}))["devices"]
        if not devices:
            print(f"no free {driver} device in the pool", file=sys.stderr)
            return 1
        device_id = devices[0]["device_id"]
        task = await _call(session, "start_session", {"device_id": device_id, "idle_timeout_s": 60,
                                                      "wait_s": wait_s})
        session_id = task["task_id"]
        if task["status"] != "running":
            print(f"session {session_id} did not start: {task['status']} {task.get('waiting_reason')}",
                  file=sys.stderr)
            await _call(session, "end_session", {"session_id": session_id})
            return 1
        print(f"session {session_id} on {device_id}")
        planner = ScriptedPlanner()
        try:
            answer = await _call(session, "observe", {"session_id": session_id})
            for number in range(1, MAX_STEPS + 1):
                step = planner.next(_elements(answer))
                if step is None:
                    print(f"goal reached in {number - 1} steps: Airplane mode on, and noted")
                    return 0
                answer = await _call(session, step.tool, {"session_id": session_id, **step.arguments})
                print(f"step {number}: {step.why}: {step.tool} -> {answer.get('status')}"
                      f"{' (' + str(answer['error']) + ')' if answer.get('error') else ''}")
            print(f"goal not reached in {MAX_STEPS} steps", file=sys.stderr)
            return 1
        finally:
            await _call(session, "end_session", {"session_id": session_id})
            print(f"session {session_id} ended")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TETHER_URL", "http://127.0.0.1:8000"),
                        help="the coordinator (default: $TETHER_URL)")
    parser.add_argument("--driver", default="sim", help="the driver of the phone to take (default: sim)")
    parser.add_argument("--wait", type=int, default=30, help="seconds to wait for a free phone")
    args = parser.parse_args()
    token = os.environ.get("TETHER_TOKEN")
    if not token:
        parser.error("set TETHER_TOKEN to an operator token with the submit scope")
    return asyncio.run(run(args.url, token, args.driver, args.wait))


if __name__ == "__main__":
    sys.exit(main())
