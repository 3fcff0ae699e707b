"""/mcp through the official SDK's own client (``mcp.client.streamable_http``), on real Redis and
fakeredis: who may call it (the operator API's 401, a tool outside the token's scopes), the tool
list as PROTOCOL.md names it, the tools that need no device, and the OpenAPI document leaving
/mcp out. The sessions' tools against a real agent are tests/e2e/test_mcp_processes.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from tests.conftest import ADMIN, Api

pytestmark = pytest.mark.anyio

# PROTOCOL.md, "MCP: sessions for agents", its list of tools as written there.
PROTOCOL_TOOLS = """
`list_devices` (filters: driver, labels, free only), `start_session` (`device_id` or labels,
optional `team`, `idle_timeout_s`; waits until the session runs or says why it waits),
`observe`, `tap`, `type_text`, `swipe`, `press_key`, `launch_app` (each takes `session_id`
and answers with the screen as image content and the elements as text), `end_session`,
`submit_task` and `get_task` (goal or workflow tasks, as `POST /api/v1/tasks`).
"""
SESSION_TOOLS = ("observe", "tap", "type_text", "swipe", "press_key", "launch_app")


@asynccontextmanager
async def mcp_client(api: Api, token: str | None = ADMIN) -> AsyncIterator[ClientSession]:
    """The SDK's client, over HTTP to the in-process coordinator, as ``token``."""
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    transport = httpx2.ASGITransport(app=api.app)
    async with (httpx2.AsyncClient(transport=transport, base_url="http://coordinator", headers=headers) as http,
                streamable_http_client("http://coordinator/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        yield session


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def mint(api: Api, scopes: list[str], **extra: Any) -> str:
    response = await api.admin("POST", "/api/v1/operator-tokens", json={"name": "agent", "scopes": scopes, **extra})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


async def test_the_tool_list_is_protocols_with_a_description_and_schema_each(api: Api) -> None:
    named = re.findall(r"`([a-z_]+)`", PROTOCOL_TOOLS)
    wanted = [n for n in named if n not in ("device_id", "team", "idle_timeout_s", "session_id")]
    async with mcp_client(api) as session:
        tools = (await session.list_tools()).tools
    assert [t.name for t in tools] == wanted
    for tool in tools:
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object", tool.name
    by_name = {t.name: t for t in tools}
    for name in SESSION_TOOLS:
        assert "session_id" in by_name[name].input_schema["required"], name
        assert "screen" in (by_name[name].description or ""), name


async def test_the_first_requests_of_a_process_come_together_and_each_gets_its_answer(api: Api) -> None:
    # The SDK loads on /mcp's first request (coordinator/mcp/endpoint.py): requests that come
    # while it loads wait for the one load, and each is answered on its own.
    async def tools_seen() -> list[str]:
        async with mcp_client(api) as session:
            return [t.name for t in (await session.list_tools()).tools]

    seen = await asyncio.gather(*(tools_seen() for _ in range(5)))
    assert len(seen) == 5 and all(names == seen[0] and "observe" in names for names in seen), seen


async def test_a_missing_bad_or_revoked_token_gets_the_contracts_401(api: Api) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    transport = httpx2.ASGITransport(app=api.app)
    token = await mint(api, ["read"])
    async with httpx2.AsyncClient(transport=transport, base_url="http://coordinator") as http:
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
        for bearer in (None, "Bearer nope", "Bearer tto_unknown0123456789"):
            answer = await http.post("/mcp", json=body, headers={**headers, **({"authorization": bearer} if bearer
                                                                               else {})})
            assert answer.status_code == 401, answer.text
            assert answer.json()["error"]["code"] == "unauthorized"
        ok = await http.post("/mcp", json=body, headers={**headers, "authorization": f"Bearer {token}"})
        assert ok.status_code == 200, ok.text
        [listed] = [t["id"] for t in (await api.admin("GET", "/api/v1/operator-tokens")).json()["operator_tokens"]]
        assert (await api.admin("DELETE", f"/api/v1/operator-tokens/{listed}")).status_code == 200
        revoked = await http.post("/mcp", json=body, headers={**headers, "authorization": f"Bearer {token}"})
        assert revoked.status_code == 401, revoked.text
        assert revoked.json()["error"]["code"] == "unauthorized"


async def test_a_tool_outside_the_tokens_scopes_is_a_tool_error_naming_it_and_starts_nothing(api: Api) -> None:
    await api.heartbeat("host-a", ["phone-1"])
    reader = await mint(api, ["read"])
    async with mcp_client(api, reader) as session:
        started = await session.call_tool("start_session", {"device_id": "phone-1", "wait_s": 0})
        submitted = await session.call_tool("submit_task", {"kind": "goal", "goal": "Open Settings",
                                                            "device_id": "phone-1"})
        listed = await session.call_tool("list_devices", {})
    for refused in (started, submitted):
        assert refused.is_error
        assert text_of(refused).startswith("insufficient_scope:") and "'submit'" in text_of(refused)
    assert not listed.is_error and "phone-1" in text_of(listed)
    tasks = (await api.admin("GET", "/api/v1/tasks")).json()["tasks"]
    assert tasks == []


async def test_bad_arguments_and_unknown_tasks_are_tool_errors_with_the_contracts_code(api: Api) -> None:
    async with mcp_client(api) as session:
        unknown_field = await session.call_tool("list_devices", {"drivr": "sim"})
        bad_id = await session.call_tool("get_task", {"task_id": "not an id"})
        missing = await session.call_tool("get_task", {"task_id": "t_nothing"})
        session_task = await session.call_tool("submit_task", {"kind": "session", "device_id": "phone-1"})
        no_tool = await session.call_tool("fly", {})
    assert unknown_field.is_error and text_of(unknown_field).startswith("invalid_request: unknown field 'drivr'")
    assert bad_id.is_error and text_of(bad_id).startswith("invalid_request: task_id")
    assert missing.is_error and text_of(missing).startswith("not_found:")
    assert session_task.is_error and text_of(session_task).startswith("invalid_request:")
    assert no_tool.is_error and text_of(no_tool).startswith("not_found: no tool 'fly'")


async def test_list_devices_filters_by_driver_labels_and_free(api: Api) -> None:
    await api.heartbeat("host-a", [
        {"device_id": "p-berlin", "driver": "sim", "status": "available", "labels": {"site": "berlin"}},
        {"device_id": "p-paris", "driver": "sim", "status": "available", "labels": {"site": "paris"}},
        {"device_id": "p-busy", "driver": "sim", "status": "busy", "labels": {"site": "berlin"}},
        {"device_id": "p-adb", "driver": "adb", "status": "available", "labels": {"site": "berlin"}},
    ])
    async with mcp_client(api) as session:
        berlin = text_of(await session.call_tool("list_devices", {"driver": "sim", "labels": {"site": "berlin"}}))
        free = text_of(await session.call_tool("list_devices", {"labels": {"site": "berlin"}, "free_only": True}))
    assert [line.split()[0] for line in berlin.splitlines()] == ["p-berlin", "p-busy"]
    assert [line.split()[0] for line in free.splitlines()] == ["p-adb", "p-berlin"]


async def test_submit_task_and_get_task_are_the_operator_apis(api: Api) -> None:
    await api.heartbeat("host-a", ["phone-1"])
    async with mcp_client(api) as session:
        submitted = await session.call_tool("submit_task", {"kind": "goal", "goal": "Turn on airplane mode",
                                                            "device_id": "phone-1", "idempotency_key": "k1"})
        again = await session.call_tool("submit_task", {"kind": "goal", "goal": "Turn on airplane mode",
                                                        "device_id": "phone-1", "idempotency_key": "k1"})
        task_id = re.search(r"task (t_\w+) created", text_of(submitted))
        assert task_id is not None, text_of(submitted)
        read = await session.call_tool("get_task", {"task_id": task_id[1]})
    assert "already created" in text_of(again)
    assert f'"task_id":"{task_id[1]}"' in text_of(read)
    task = await api.task(task_id[1])
    assert task["status"] == "assigned" and task["created_by"] == "admin"


async def test_the_openapi_document_leaves_mcp_out(api: Api) -> None:
    document = (await api.client.get("/openapi.json")).json()
    assert not [path for path in document["paths"] if path.startswith("/mcp")]



async def test_start_session_answers_why_it_waits_when_no_device_can_take_it(api: Api) -> None:
    async with mcp_client(api) as session:
        waiting = await session.call_tool("start_session", {"device_id": "phone-nobody-has", "wait_s": 1})
    assert not waiting.is_error, text_of(waiting)
    assert waiting.structured_content is not None and waiting.structured_content["status"] == "queued"
    assert "waiting_reason=no_matching_device" in text_of(waiting)


async def test_the_per_request_protocol_revision_is_served_and_authenticated_alike(api: Api) -> None:
    # The SDK's Client negotiates the newest revision (2026-07-28: no handshake, one request per
    # POST) when the server offers it; the endpoint and the tools are the same either way.
    reader = await mint(api, ["read"])
    transport = httpx2.ASGITransport(app=api.app)
    async with (httpx2.AsyncClient(transport=transport, base_url="http://coordinator",
                                   headers={"authorization": f"Bearer {reader}"}) as http,
                Client(streamable_http_client("http://coordinator/mcp", http_client=http), mode="auto") as client):
        assert client.session.discover_result is not None
        listed = await client.call_tool("list_devices", {})
        refused = await client.call_tool("start_session", {"device_id": "phone-1"})
    assert not listed.is_error
    assert refused.is_error and text_of(refused).startswith("insufficient_scope:")
