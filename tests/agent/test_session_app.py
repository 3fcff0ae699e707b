"""The agent's session loop against the real coordinator app (in-process, on real Redis and
fakeredis): an operator's command wakes the agent's poll, the sim phone does it, and the
operator's waiting request answers with the screen after it; the end is reported as the
coordinator asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from agent.client import CoordinatorClient
from agent.executor import RuntimeExecutor
from agent.host import HostAgent
from agent.host_config import HostConfig
from agent.retry import RetryPolicy
from agent.runtime import DeviceManager, ScriptedPlanner, TaskRunner, parse_device_specs
from tests.conftest import Api
from tests.support import HOSTS, wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("redis_client", ["redis", "fakeredis"], indirect=True)]

HOST = "host-a"
DEVICE = "live-1"


@asynccontextmanager
async def running_agent(api: Api) -> AsyncIterator[HostAgent]:
    manager = await DeviceManager.discover(parse_device_specs(f"sim:{DEVICE}"))
    manager.bind({d.local_id: d.local_id for d in manager.local_devices()})  # each its own cloud id
    executor = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), None)
    config = HostConfig(hostname="lab", version="test", poll_wait_s=1, heartbeat_interval_s=0.2,
                        shutdown_grace_s=0.2, retry_policy=RetryPolicy(base_s=0.01, cap_s=0.05),
                        min_poll_interval_s=0.01)
    client = CoordinatorClient("http://coordinator", transport=httpx.ASGITransport(app=api.app))
    agent = HostAgent(client.host(HOST, SecretStr(HOSTS[HOST])), executor, config)
    shutdown = asyncio.Event()
    task = asyncio.create_task(agent.run(shutdown))
    try:
        yield agent
    finally:
        shutdown.set()
        assert await asyncio.wait_for(task, 10) == 0
        await client.aclose()


async def command(api: Api, task_id: str, action: dict[str, Any]) -> dict[str, Any]:
    sent = await api.admin("POST", f"/api/v1/tasks/{task_id}/commands", params={"wait_s": 10},
                           json={"action": action})
    assert sent.status_code == 200, sent.text
    return dict(sent.json())


async def test_an_operators_command_is_done_on_the_phone_and_answered_with_the_screen(api: Api) -> None:
    async with running_agent(api):
        created = await api.create_task(kind="session", device_id=DEVICE)
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]

        async def running() -> bool:
            return (await api.task(task_id))["status"] == "running"

        await wait_until_async(running, timeout=10, what="the session running")
        tapped = await command(api, task_id, {"action": "tap", "x": 280, "y": 550})
        assert tapped["status"] == "done", tapped
        assert "Airplane mode" in [e["text"] for e in tapped["observation"]["elements"]]
        screen = await api.admin("GET", tapped["observation"]["screen_url"])
        assert screen.status_code == 200 and screen.content.startswith(b"\x89PNG")
        missing = await command(api, task_id, {"action": "tap", "text": "No such row", "observe": False})
        assert missing["status"] == "failed" and missing["error"] and missing["observation"] is None
        assert (await api.admin("POST", f"/api/v1/tasks/{task_id}/end")).status_code == 200

        async def ended() -> dict[str, Any] | None:
            task = await api.task(task_id)
            return task if task["status"] != "running" else None

        task = await wait_until_async(ended, timeout=10, what="the session's result")
    assert task["status"] == "succeeded" and task["result"]["metadata"]["end_reason"] == "ended", task
