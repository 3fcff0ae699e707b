"""A run's evidence, from the real agent loops and runtime (sim phone, workflow runner) to the
real coordinator app (in process, real Redis, blobs in a folder): step screenshots tied to their
step, the final screen of a failed run, the log, each HOST_AGENT_ARTIFACTS mode, and uploads that
fail or hang costing the run nothing.

``Gate`` wraps the coordinator app: it sees every request, and can answer uploads 503 or hold
them forever, so the agent meets a coordinator whose artifact store is in trouble."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from pydantic import SecretStr

from agent.artifacts import UPLOAD_TRIES, ArtifactMode
from agent.client import CoordinatorClient
from agent.executor import RuntimeExecutor
from agent.host import HostAgent
from agent.host_config import HostConfig
from agent.retry import RetryPolicy
from agent.runtime import (
    DeviceManager,
    TaskRunner,
    WorkflowRunner,
    make_planner,
    parse_device_specs,
)
from tests.conftest import Api
from tests.support import HOSTS, wait_until_async, write_workflows

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("redis_client", ["redis"], indirect=True)]

HOST = "host-a"
DEVICE = "art-phone"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

THREE_STEPS = [{"action": "key", "key": "home"}, {"action": "launch", "app": "notes"},
               {"action": "assert_text", "text": "Save"}]
FAILS_AT_STEP_1 = [{"action": "launch", "app": "settings"}, {"action": "assert_text", "text": "No such row"}]


class Gate:
    """ASGI middleware around the coordinator: counts uploads per name and renewals, and can
    answer the next ``fail_uploads`` uploads (or all, with -1) 503, or hold every upload."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.fail_uploads = 0
        self.hold_uploads = False
        self.uploads: list[str] = []
        self.held = 0
        self.renewals_while_held = 0
        self._never = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        path, method = scope.get("path", ""), scope.get("method")
        if method == "PUT" and "/artifacts/" in path:
            self.uploads.append(path.rsplit("/", 1)[-1])
            if self.hold_uploads:
                self.held += 1
                await self._never.wait()
            if self.fail_uploads:
                self.fail_uploads -= 1 if self.fail_uploads > 0 else 0
                body = json.dumps({"error": {"code": "unavailable", "message": "store down"}}).encode()
                await send({"type": "http.response.start", "status": 503,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        elif path.endswith("/renew") and self.held:
            self.renewals_while_held += 1
        await self.app(scope, receive, send)


@asynccontextmanager
async def running_agent(api: Api, gate: Gate, workflows: Path, mode: ArtifactMode, drain_s: float = 5.0,
                        shutdown: asyncio.Event | None = None) -> AsyncIterator[HostAgent]:
    manager = await DeviceManager.discover(parse_device_specs(f"sim:{DEVICE}"))
    manager.bind({d.local_id: d.local_id for d in manager.local_devices()})  # each its own cloud id
    executor = RuntimeExecutor(manager, TaskRunner(make_planner("scripted", None, None, None)),
                               WorkflowRunner(workflows))
    config = HostConfig(hostname="lab", version="test", poll_wait_s=1, heartbeat_interval_s=0.2,
                        shutdown_grace_s=0.2, retry_policy=RetryPolicy(base_s=0.01, cap_s=0.05),
                        min_poll_interval_s=0.01, artifacts=mode, artifact_drain_s=drain_s)
    client = CoordinatorClient("http://coordinator", transport=httpx.ASGITransport(app=gate))
    agent = HostAgent(client.host(HOST, SecretStr(HOSTS[HOST])), executor, config)
    shutdown = shutdown or asyncio.Event()
    task = asyncio.create_task(agent.run(shutdown))
    try:
        yield agent
    finally:
        shutdown.set()
        assert await asyncio.wait_for(task, 10) == 0
        await client.aclose()


async def run_workflow(api: Api, name: str) -> dict[str, Any]:
    """Submit ``name`` to the sim phone and wait for its result; the finished task."""
    created = await api.create_task(kind="workflow", workflow={"name": name, "params": {}}, device_id=DEVICE,
                                    max_attempts=1)
    assert created.status_code == 201, created.text
    task_id = created.json()["task_id"]

    async def finished() -> dict[str, Any] | None:
        task = await api.task(task_id)
        return task if task["status"] in ("succeeded", "failed", "cancelled") else None

    return await wait_until_async(finished, timeout=20, what=f"task {task_id} finished")


async def artifacts(api: Api, task_id: str) -> dict[str, dict[str, Any]]:
    listed = await api.admin("GET", f"/api/v1/tasks/{task_id}/artifacts")
    assert listed.status_code == 200, listed.text
    return {a["name"]: a for a in listed.json()["artifacts"]}


async def fetch(api: Api, task_id: str, name: str) -> bytes:
    response = await api.admin("GET", f"/api/v1/tasks/{task_id}/artifacts/{name}")
    assert response.status_code == 200, response.text
    return response.content


def decoded_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(PNG_SIGNATURE)
    image = Image.open(io.BytesIO(png))
    image.load()  # every pixel decoded: a truncated PNG raises here
    return image.size


@pytest.fixture
def workflows(tmp_path: Path) -> Path:
    return write_workflows(tmp_path / "workflows", {"three": THREE_STEPS, "fails": FAILS_AT_STEP_1})


@pytest.fixture
async def gated(api_factory: Callable[..., Any], tmp_path: Path) -> AsyncIterator[tuple[Api, Gate]]:
    async with api_factory(artifacts_dir=tmp_path / "blobs", lease_ttl_s=0.6) as api:
        assert (await api.heartbeat(HOST, [DEVICE])).status_code == 200
        yield api, Gate(api.app)


async def test_all_uploads_each_steps_screen_with_its_index_and_the_log(
        gated: tuple[Api, Gate], workflows: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    api, gate = gated
    async with running_agent(api, gate, workflows, ArtifactMode.ALL):
        task = await run_workflow(api, "three")
        failed = await run_workflow(api, "fails")
    assert task["status"] == "succeeded"
    found = await artifacts(api, task["task_id"])
    assert sorted(found) == ["log.txt", "step-000.png", "step-001.png", "step-002.png"]
    for index in range(3):
        entry = found[f"step-{index:03d}.png"]
        assert (entry["step_index"], entry["content_type"], entry["attempt"]) == (index, "image/png", 1)
        assert decoded_size(await fetch(api, task["task_id"], f"step-{index:03d}.png"))[0] == 270
    assert found["log.txt"]["step_index"] is None and found["log.txt"]["content_type"] == "text/plain"
    text = (await fetch(api, task["task_id"], "log.txt")).decode()
    assert text.startswith(f"tether agent log of task {task['task_id']} attempt 1 on device {DEVICE}")
    assert f"task {task['task_id']} attempt 1 finished: succeeded" in text  # the agent's own line
    assert text.rstrip().endswith("run ended: succeeded")
    assert failed["task_id"] not in text  # another run's lines stay in its own log

    assert failed["status"] == "failed" and failed["result"]["failure_reason"] == "assertion_failed"
    found = await artifacts(api, failed["task_id"])
    assert sorted(found) == ["final.png", "log.txt", "step-000.png", "step-001.png"]
    assert decoded_size(await fetch(api, failed["task_id"], "final.png"))[0] == 270
    assert "run ended: failed (assertion_failed)" in (await fetch(api, failed["task_id"], "log.txt")).decode()


async def test_failures_uploads_only_a_failed_runs_final_screen_and_log(
        gated: tuple[Api, Gate], workflows: Path) -> None:
    api, gate = gated
    async with running_agent(api, gate, workflows, ArtifactMode.FAILURES):
        succeeded = await run_workflow(api, "three")
        failed = await run_workflow(api, "fails")
    assert succeeded["status"] == "succeeded" and await artifacts(api, succeeded["task_id"]) == {}
    assert failed["status"] == "failed"
    assert sorted(await artifacts(api, failed["task_id"])) == ["final.png", "log.txt"]
    assert gate.uploads == ["final.png", "log.txt"]  # no step screen was ever sent


async def test_off_uploads_nothing(gated: tuple[Api, Gate], workflows: Path) -> None:
    api, gate = gated
    async with running_agent(api, gate, workflows, ArtifactMode.OFF):
        failed = await run_workflow(api, "fails")
    assert failed["status"] == "failed" and await artifacts(api, failed["task_id"]) == {}
    assert gate.uploads == []


async def test_failing_uploads_are_retried_then_given_up_without_touching_the_result(
        gated: tuple[Api, Gate], workflows: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    api, gate = gated
    gate.fail_uploads = 2  # the first screen's first two tries fail: the third stores it
    async with running_agent(api, gate, workflows, ArtifactMode.ALL):
        recovered = await run_workflow(api, "three")
        gate.fail_uploads = -1  # from now on the store is down
        lost = await run_workflow(api, "three")
    assert recovered["status"] == "succeeded"
    assert sorted(await artifacts(api, recovered["task_id"])) == [
        "log.txt", "step-000.png", "step-001.png", "step-002.png"]
    assert gate.uploads[:3] == ["step-000.png"] * 3

    assert lost["status"] == "succeeded" and lost["attempt"] == 1  # the result is the run's, untouched
    assert lost["result"]["metadata"]["steps"] == 3
    assert await artifacts(api, lost["task_id"]) == {}
    sent = gate.uploads[len(gate.uploads) - 4 * UPLOAD_TRIES:]
    assert sorted(set(sent)) == ["log.txt", "step-000.png", "step-001.png", "step-002.png"]
    assert all(sent.count(name) == UPLOAD_TRIES for name in set(sent))  # tried a little, then no more
    gave_up = [r.getMessage() for r in caplog.records if "giving up uploading" in r.getMessage()
               and lost["task_id"] in r.getMessage()]
    assert len(gave_up) == 4 and all(f"after {UPLOAD_TRIES} tries" in line for line in gave_up)  # one line each


async def test_a_hanging_upload_holds_up_neither_renewal_nor_the_result(
        gated: tuple[Api, Gate], workflows: Path, caplog: pytest.LogCaptureFixture) -> None:
    api, gate = gated
    # A first step, then a wait of over two lease lifetimes (0.6 s): the lease lives only if
    # renewals go on while the first screen's upload hangs.
    write_workflows(workflows, {"long": [{"action": "key", "key": "home"}, {"action": "wait", "ms": 1500},
                                         {"action": "key", "key": "home"}]})
    gate.hold_uploads = True
    async with running_agent(api, gate, workflows, ArtifactMode.ALL, drain_s=0.3):
        task = await run_workflow(api, "long")
    assert (task["status"], task["attempt"]) == ("succeeded", 1)  # never lost its lease
    assert gate.uploads[0] == "step-000.png" and gate.held == 1  # one at a time: the rest wait behind it
    assert gate.renewals_while_held >= 2
    assert any("not done after 0.3s; giving them up" in r.getMessage() for r in caplog.records)
    assert await artifacts(api, task["task_id"]) == {}


async def test_a_goal_run_leaves_a_screen_per_device_step(gated: tuple[Api, Gate], workflows: Path) -> None:
    api, gate = gated
    async with running_agent(api, gate, workflows, ArtifactMode.ALL):
        created = await api.create_task(goal="Turn on airplane mode", device_id=DEVICE, max_attempts=1)
        task_id = created.json()["task_id"]

        async def finished() -> dict[str, Any] | None:
            task = await api.task(task_id)
            return task if task["status"] in ("succeeded", "failed") else None

        task = await wait_until_async(finished, timeout=20, what="the goal's result")
    assert task["status"] == "succeeded"
    found = await artifacts(api, task_id)
    steps = sorted(name for name in found if name.startswith("step-"))
    assert steps and steps == [f"step-{i:03d}.png" for i in range(len(steps))]
    assert [found[name]["step_index"] for name in steps] == list(range(len(steps)))
    assert len(steps) == task["result"]["metadata"]["steps"]  # one per device action, none for "done"
    assert "log.txt" in found and "final.png" not in found


async def test_a_run_stopped_by_shutdown_reports_without_waiting_for_its_uploads(
        gated: tuple[Api, Gate], workflows: Path) -> None:
    api, gate = gated
    write_workflows(workflows, {"slow": [{"action": "key", "key": "home"}, {"action": "wait", "ms": 60_000}]})
    gate.hold_uploads = True
    shutdown = asyncio.Event()
    # The drain could take a minute; the shutdown waits for reports only about a second.
    async with running_agent(api, gate, workflows, ArtifactMode.ALL, drain_s=60, shutdown=shutdown):
        created = await api.create_task(kind="workflow", workflow={"name": "slow", "params": {}}, device_id=DEVICE,
                                        max_attempts=1)
        await wait_until_async(lambda: gate.held == 1, timeout=10, what="the first screen's upload hanging")
        shutdown.set()
    task = await api.task(created.json()["task_id"])
    assert (task["status"], task["result"]["failure_reason"]) == ("failed", "shutdown")  # reported, not lapsed
