"""/mcp end to end, with the official SDK's own client (``mcp.client.streamable_http``): two real
``python -m coordinator serve`` processes on one real Redis deployment (and one folder of
artifacts), a real ``python -m agent`` with a sim phone, and an agent's requests alternating
between the two processes. One fleet for the module: its tests are few, and each drives its own
session. What needs no device (tool list, scopes, arguments) is tests/coordinator/test_mcp.py."""

from __future__ import annotations

import base64
import io
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ImageContent, TextContent
from PIL import Image

from tests.support import (
    FAST_COORDINATOR,
    HOSTS,
    REPO,
    CoordinatorProcess,
    Process,
    agent_process,
    child_env,
    coordinator_env,
    fresh_prefix,
    running,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@dataclass
class Fleet:
    a: CoordinatorProcess
    b: CoordinatorProcess
    workdir: Path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("mcp")
    with fresh_prefix() as prefix, ExitStack() as stack:
        env = coordinator_env(prefix, **FAST_COORDINATOR, COORDINATOR_ARTIFACTS_DIR=str(workdir / "artifacts"))
        a = stack.enter_context(running(CoordinatorProcess(env, workdir / "a")))
        b = stack.enter_context(running(CoordinatorProcess(env, workdir / "b")))
        agent = agent_process(a.url, workdir / "agent", HOST_ID="host-a", TOKEN=HOSTS["host-a"],
                              DEVICES="sim:phone-1")
        stack.callback(agent.stop)
        wait_pooled(a, "phone-1")
        yield Fleet(a, b, workdir)


def wait_pooled(coordinator: CoordinatorProcess, device_id: str) -> None:
    wait_until(lambda: any(d["device_id"] == device_id and d["host_online"] and d["status"] == "available"
                           for d in coordinator.call("GET", "/api/v1/devices")["devices"]),
               what=f"{device_id} pooled")


def mint(coordinator: CoordinatorProcess, name: str, scopes: list[str], **extra: Any) -> tuple[str, str]:
    """A new operator token: its id and its secret."""
    token = coordinator.call("POST", "/api/v1/operator-tokens", json={"name": name, "scopes": scopes, **extra})
    return token["id"], token["token"]


@asynccontextmanager
async def mcp_client(coordinator: CoordinatorProcess, token: str) -> AsyncIterator[ClientSession]:
    async with (httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60) as http,
                streamable_http_client(f"{coordinator.url}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        yield session


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(session: ClientSession, tool: str, **arguments: Any) -> CallToolResult:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {text_of(result)}"
    return result


def elements(result: CallToolResult) -> list[dict[str, Any]]:
    assert result.structured_content is not None
    return list(result.structured_content["observation"]["elements"])


def index_of(result: CallToolResult, *, text: str | None = None, ident: str | None = None) -> int:
    return next(i for i, e in enumerate(elements(result)) if e["text"] == text or e["id"] == ident)


async def test_an_agent_drives_a_sim_phone_through_every_tool_across_two_processes(fleet: Fleet) -> None:
    _, token = mint(fleet.a, "mcp-agent", ["submit", "read"], team="mcp-lab")
    async with mcp_client(fleet.a, token) as a, mcp_client(fleet.b, token) as b:
        listed = await call(a, "list_devices", driver="sim", free_only=True)
        assert "phone-1 driver=sim host=host-a status=available free" in text_of(listed)
        started = await call(b, "start_session", device_id="phone-1", idle_timeout_s=60)
        assert started.structured_content is not None
        session_id = started.structured_content["task_id"]
        assert started.structured_content["status"] == "running", text_of(started)

        seen = await call(a, "observe", session_id=session_id)
        [image] = [c for c in seen.content if isinstance(c, ImageContent)]
        with Image.open(io.BytesIO(base64.b64decode(image.data))) as png:
            assert png.format == "PNG" and max(png.size) <= 1280
        assert '"Settings" id=home:id/app_settings bounds=' in text_of(seen)

        settings = await call(b, "tap", session_id=session_id, element=index_of(seen, ident="home:id/app_settings"))
        switch = index_of(settings, ident="settings:id/airplane_mode_switch")
        was = elements(settings)[switch]["text"]
        toggled = await call(a, "tap", session_id=session_id, x=540, y=280)  # the Airplane mode row
        assert elements(toggled)[switch]["text"] == ("Off" if was == "On" else "On")
        await call(b, "press_key", session_id=session_id, key="home")
        notes = await call(a, "launch_app", session_id=session_id, app="notes")
        await call(b, "tap", session_id=session_id, element=index_of(notes, ident="notes:id/editor"))
        typed = await call(a, "type_text", session_id=session_id, text="noted over MCP")
        assert any(e["text"] == "noted over MCP" for e in elements(typed))
        saved = await call(b, "tap", session_id=session_id, text="Save")
        assert any(e["id"] == "notes:id/note" and e["text"] == "noted over MCP" for e in elements(saved))
        await call(a, "swipe", session_id=session_id, x1=540, y1=1600, x2=540, y2=600)
        await call(b, "end_session", session_id=session_id)

        ended = fleet.a.wait_task(session_id)
        assert ended["status"] == "succeeded" and ended["team"] == "mcp-lab"
        assert ended["result"]["metadata"]["end_reason"] == "ended"
        read = await call(b, "get_task", task_id=session_id)
        assert read.structured_content is not None and read.structured_content["status"] == "succeeded"
        gone = await a.call_tool("observe", {"session_id": session_id})
        assert gone.is_error and text_of(gone).startswith("session_ended:")

    recording = fleet.b.call("GET", f"/api/v1/tasks/{session_id}/commands")["commands"]
    kinds = [c["action"]["action"] for c in recording]
    # A tap by element looks at the screen first: the index means what the model saw.
    assert kinds == ["observe", "observe", "tap", "tap", "key", "launch", "observe", "tap", "type", "tap", "swipe"]
    assert {c["actor"] for c in recording} == {"mcp-agent"}


async def test_a_token_revoked_mid_session_gets_401_from_the_next_request(fleet: Fleet) -> None:
    token_id, token = mint(fleet.a, "mcp-revoked", ["submit"])
    async with mcp_client(fleet.a, token) as session:
        started = await call(session, "start_session", device_id="phone-1")
        assert started.structured_content is not None
        session_id = started.structured_content["task_id"]
        await call(session, "observe", session_id=session_id)
        fleet.b.call("DELETE", f"/api/v1/operator-tokens/{token_id}")
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(f"{fleet.a.url}/mcp", headers={
                "authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2025-11-25"},
                json={"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "observe", "arguments": {"session_id": session_id}}})
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"
    commands = fleet.a.call("GET", f"/api/v1/tasks/{session_id}/commands")["commands"]
    assert len(commands) == 1  # the refused request sent nothing to the phone
    fleet.a.call("POST", f"/api/v1/tasks/{session_id}/end")
    fleet.a.wait_task(session_id)


async def test_a_session_whose_host_dies_answers_session_ended_without_leaving_the_agent_waiting(
        fleet: Fleet) -> None:
    doomed: Process = agent_process(fleet.b.url, fleet.workdir / "agent-b", HOST_ID="host-b",
                                    TOKEN=HOSTS["host-b"], DEVICES="sim:phone-9")
    try:
        wait_pooled(fleet.b, "phone-9")
        _, token = mint(fleet.a, "mcp-orphan", ["submit"])
        async with mcp_client(fleet.b, token) as session:
            started = await call(session, "start_session", device_id="phone-9")
            assert started.structured_content is not None
            session_id = started.structured_content["task_id"]
            await call(session, "observe", session_id=session_id)
            doomed.signal(signal.SIGKILL)
            doomed.wait()
            # Nobody will answer this one: the lease lapses (1.5 s here), the session ends, and the
            # waiting command is told at once, far inside its own 30 s bound.
            sent = time.monotonic()
            orphaned = await session.call_tool("observe", {"session_id": session_id})
            assert orphaned.is_error and text_of(orphaned).startswith("session_ended:"), text_of(orphaned)
            assert time.monotonic() - sent < 15
        task = fleet.a.wait_task(session_id)
        assert task["status"] == "failed" and task["result"]["failure_reason"] == "lease_expired"
    finally:
        doomed.stop()


def test_the_example_agent_reaches_its_goal_on_a_sim_phone(fleet: Fleet) -> None:
    _, token = mint(fleet.a, "example-agent", ["submit", "read"])
    done = subprocess.run([sys.executable, str(REPO / "examples" / "mcp_agent.py")], capture_output=True, text=True,
                          timeout=120, check=False, cwd=fleet.workdir,
                          env=child_env(TETHER_URL=fleet.b.url, TETHER_TOKEN=token))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "goal reached in" in done.stdout and "ended" in done.stdout.splitlines()[-1], done.stdout
