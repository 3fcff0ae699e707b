"""A host's leases renewed together (agent/renewals.py): with two or more leases every renewal is
one batch naming all of them, a refused entry stops only its own run, and the answer a lease did
not ask for still counts for it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.agent.host_fakes import (
    FakeCoordinator,
    FakeExecutor,
    Running,
    make_agent,
    publish,
    results_for,
    wait_until,
)

pytestmark = pytest.mark.anyio

PHONES = ("phone-1", "phone-2", "phone-3")


async def _three_running(coordinator: FakeCoordinator, executor: FakeExecutor) -> list[dict[str, Any]]:
    tasks = [coordinator.assign(phone) for phone in PHONES]
    await wait_until(lambda: all(t["task_id"] in executor.started for t in tasks), what="three runs")
    return tasks


def _batches(coordinator: FakeCoordinator) -> list[set[str]]:
    return [{lease["lease_id"] for lease in call.body["leases"]} for call in coordinator.of("renewals")]


async def test_a_host_with_several_leases_renews_them_all_in_one_request() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=300)
    executor = FakeExecutor(PHONES)
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        tasks = await _three_running(coordinator, executor)
        leases = {t["lease_id"] for t in tasks}
        singles = len(coordinator.of("renew"))
        await wait_until(lambda: sum(b == leases for b in _batches(coordinator)) >= 4, what="four whole batches")
        # Once all three are held, no lease is renewed alone, and the three schedules coincide:
        # about one request per renewal interval for the host, not three.
        assert len(coordinator.of("renew")) == singles
        whole = [call for call in coordinator.of("renewals") if {x["lease_id"] for x in call.body["leases"]} == leases]
        gaps = [b.at - a.at for a, b in itertools.pairwise(whole)]
        assert min(gaps) > 0.3 * 0.3 / 2, "renewals of one interval ride in one batch"
        for task in tasks:
            executor.finish(task["task_id"])
        await wait_until(lambda: all(results_for(coordinator, t["task_id"]) for t in tasks), what="results")


async def test_a_refused_entry_stops_only_its_own_run() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=300)
    executor = FakeExecutor(PHONES)
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        lost, *kept = await _three_running(coordinator, executor)
        coordinator.renew_conflict[lost["lease_id"]] = "lease_expired"
        await wait_until(lambda: lost["task_id"] in executor.returned, what="the refused run stopped")
        assert executor.controls[lost["task_id"]].stop_reason == "lease_lost"
        batches = len(coordinator.of("renewals"))
        await wait_until(lambda: len(coordinator.of("renewals")) >= batches + 2, what="two more batches")
        assert all(k["task_id"] not in executor.returned for k in kept)
        assert lost["lease_id"] not in _batches(coordinator)[-1]  # a lost lease is not renewed again
        for task in kept:
            executor.finish(task["task_id"])
        await wait_until(lambda: all(results_for(coordinator, t["task_id"]) for t in kept), what="results")
    assert results_for(coordinator, lost["task_id"]) == []


async def test_a_cancel_told_in_a_batch_stops_that_run() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=300)
    executor = FakeExecutor(PHONES)
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        cancelled, *others = await _three_running(coordinator, executor)
        coordinator.cancel_requested.add(cancelled["task_id"])
        await wait_until(lambda: executor.controls[cancelled["task_id"]].stopped, what="the cancelled run stopped")
        assert executor.controls[cancelled["task_id"]].stop_reason == "cancel_requested"
        assert not any(executor.controls[t["task_id"]].stopped for t in others)
        for task in others:
            executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, cancelled["task_id"]), what="cancelled reported")
    assert results_for(coordinator, cancelled["task_id"])[0]["status"] == "cancelled"


async def test_step_changes_of_several_leases_at_once_ride_in_one_batch() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=30_000)  # no periodic renewal inside the test
    executor = FakeExecutor(PHONES)
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        tasks = await _three_running(coordinator, executor)
        for n, task in enumerate(tasks):
            publish(executor.controls[task["task_id"]], 1, "running", f"step of {n}")
        await wait_until(lambda: all(coordinator.renewals_of(t["task_id"]) for t in tasks), what="every step sent")
        carried = [call for call in coordinator.calls if call.path.endswith(("/renew", "/renewals"))]
        # The first step change renews its lease alone or in a batch; the other two, changed at
        # the same moment, ride with it or together: never three requests.
        assert len(carried) <= 2
        for task in tasks:
            executor.finish(task["task_id"])
        await wait_until(lambda: all(results_for(coordinator, t["task_id"]) for t in tasks), what="results")
