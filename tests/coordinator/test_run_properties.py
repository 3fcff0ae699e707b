"""A run's kept state is what its tasks say (PROTOCOL.md, "Runs"), whatever happens to them: after
every step of any sequence of results, retries, expiries, cancels and reruns, its counts are its
current tasks' statuses (the latest rerun in each place), its breakdown sums to them, and its status
is `running` while one of them has not ended, else `succeeded` if all succeeded, `cancelled` if it
was cancelled, else `failed`. Hypothesis drives the in-process coordinator of the ``api`` fixture
(real Redis and fakeredis) as tests/coordinator/test_unknown_fields.py does."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Api
from tests.coordinator.helpers import expire_lease, expire_task_lease

pytestmark = pytest.mark.anyio

EXAMPLES = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ENDED = ("succeeded", "failed", "cancelled")
STEPS = ("succeed", "fail", "retry", "expire", "cancel_task", "cancel_run", "rerun")


async def _check(api: Api, run_id: str) -> None:
    run = (await api.admin("GET", f"/api/v1/runs/{run_id}")).json()
    listed = (await api.admin("GET", "/api/v1/tasks", params={"run_id": run_id, "limit": 500})).json()["tasks"]
    current = [t for t in listed if t["replaced_by"] is None]
    assert len(current) == run["tasks"]
    statuses = Counter(t["status"] for t in current)
    assert run["counts"] == {status: statuses.get(status, 0) for status in run["counts"]}
    for rows in (run["breakdown"]["devices"], run["breakdown"]["work"]):
        summed = Counter[str]()
        for row in rows:
            summed.update(row["counts"])
        assert {s: n for s, n in summed.items() if n} == {s: n for s, n in statuses.items() if n}
    if any(t["status"] not in ENDED for t in current):
        expected = "running"
    elif all(t["status"] == "succeeded" for t in current):
        expected = "succeeded"
    else:
        expected = "cancelled" if run["cancel_requested"] else "failed"
    assert run["status"] == expected
    assert (run["ended_at"] is None) == (expected == "running")


async def _step(api: Api, run_id: str, step: str) -> None:
    if step in ("succeed", "fail", "retry", "expire"):
        claimed = await api.claim("host-a")
        if claimed.status_code != 200:
            return
        assignment = claimed.json()
        if step == "expire":
            await expire_lease(api, assignment)
            await api.sweep()
        else:
            extra: dict[str, Any] = {"retryable": True} if step == "retry" else {}
            await api.result("host-a", assignment, "succeeded" if step == "succeed" else "failed", **extra)
    elif step == "cancel_task":
        tasks = (await api.admin("GET", "/api/v1/tasks", params={"run_id": run_id})).json()["tasks"]
        open_tasks = [t for t in tasks if t["status"] not in ENDED]
        if open_tasks:
            await api.admin("POST", f"/api/v1/tasks/{open_tasks[0]['task_id']}/cancel")
    elif step == "cancel_run":
        assert (await api.admin("POST", f"/api/v1/runs/{run_id}/cancel")).status_code == 200
    else:
        assert (await api.admin("POST", f"/api/v1/runs/{run_id}/rerun-failed")).status_code == 201


async def _drain(api: Api, run_id: str) -> None:
    """End the run's work, so the next example starts with free devices."""
    await api.admin("POST", f"/api/v1/runs/{run_id}/cancel")
    while (claimed := await api.claim("host-a")).status_code == 200:
        await api.result("host-a", claimed.json(), "cancelled")
    running = (await api.admin("GET", "/api/v1/tasks", params={"status": "running"})).json()["tasks"]
    for task in running:  # cancelled while running: its lease ends it
        await expire_task_lease(api.ctx.store, task["task_id"])
    await api.sweep()


async def test_a_runs_counts_and_status_are_its_tasks_after_every_step(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])

    async def example(size: int, attempts: list[int], steps: list[str]) -> None:
        tasks = [{"kind": "goal", "goal": f"goal {i % 2}", "selector": {"driver": "sim"},
                  "max_attempts": attempts[i % len(attempts)]} for i in range(size)]
        created = await api.admin("POST", "/api/v1/runs", json={"tasks": tasks})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        await _check(api, run_id)
        for step in steps:
            await _step(api, run_id, step)
            await _check(api, run_id)
        await _drain(api, run_id)
        await _check(api, run_id)

    @EXAMPLES
    @given(size=st.integers(1, 4), attempts=st.lists(st.integers(1, 2), min_size=1, max_size=4),
           steps=st.lists(st.sampled_from(STEPS), max_size=12))
    def examples(size: int, attempts: list[int], steps: list[str]) -> None:
        anyio.from_thread.run(example, size, attempts, steps)

    await anyio.to_thread.run_sync(examples)
