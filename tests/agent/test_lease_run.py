"""One leased run against a MockTransport coordinator: renewals with progress, the local lease
deadline, cancellation, and the result reported until it is answered."""

from __future__ import annotations

import pytest

from agent import lease_run
from agent.lease_run import progress_body
from agent.retry import RetryPolicy
from agent.runtime import Outcome, Progress
from tests.agent.host_fakes import (
    FakeCoordinator,
    FakeExecutor,
    Running,
    device_free,
    make_agent,
    publish,
    results_for,
    wait_until,
)

pytestmark = pytest.mark.anyio




async def test_renewal_carries_latest_progress_in_contract_shape() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=150)
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        await wait_until(lambda: coordinator.of("renew"), what="first renewal")
        first = coordinator.of("renew")[0]
        assert first.path == f"/internal/v1/hosts/host-a/leases/{task['lease_id']}/renew"
        assert first.body == {"task_id": task["task_id"], "attempt": 1}  # no progress yet: omitted
        publish(executor.controls[task["task_id"]], 4, "running", "Opened Settings")
        await wait_until(lambda: "progress" in coordinator.of("renew")[-1].body, what="progress renewal")
        assert coordinator.of("renew")[-1].body["progress"] == {
            "step_index": 4, "status": "running", "summary": "Opened Settings"
        }
        executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")


def test_progress_body_is_bounded_and_has_only_the_three_fields() -> None:
    body = progress_body(Progress(2, "running", "x" * 5000))
    assert set(body) == {"step_index", "status", "summary"}
    assert len(body["summary"]) == 500
    assert progress_body(None) is None


async def test_renewals_keep_a_long_run_alive() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=240)
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: len(coordinator.of("renew")) >= 7, what="seven renewals")
        assert not executor.controls[task["task_id"]].stopped  # over two lease lifetimes: still ours
        executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
    assert [r["status"] for r in results_for(coordinator, task["task_id"])] == ["succeeded"]


async def test_renew_409_stops_the_run_and_reports_nothing() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=150)
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        coordinator.renew_conflict[task["lease_id"]] = "lease_expired"
        await wait_until(lambda: task["task_id"] in executor.returned, what="run stopped")
        assert executor.controls[task["task_id"]].stop_reason == "lease_lost"
        await wait_until(lambda: device_free(agent.snapshot()), what="device freed")
        assert len(coordinator.of("renew")) == 1  # no renewing a lease we lost
    assert coordinator.of("results") == []


class _Clock:
    """A monotonic clock that stands still until the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_lease_deadline_passing_without_renewal_stops_the_run() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=200)
    coordinator.always["renew"] = "drop_before"  # every renewal fails: the coordinator is unreachable
    executor = FakeExecutor()
    clock = _Clock()
    agent, client = make_agent(coordinator, executor, retry_policy=RetryPolicy(base_s=0.01, cap_s=0.02), clock=clock)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        # Inside the lease, however many renewals fail, the run is still ours: it keeps trying.
        await wait_until(lambda: len(coordinator.of("renew")) >= 5, what="renewals retried")
        assert task["task_id"] not in executor.returned
        assert not executor.controls[task["task_id"]].stopped
        clock.now += 0.2  # the lease's whole time, and not one renewal got through
        await wait_until(lambda: task["task_id"] in executor.returned, what="run stopped")
        assert executor.controls[task["task_id"]].stop_reason == "lease_lost"
        await wait_until(lambda: device_free(agent.snapshot()), what="device freed")
    assert coordinator.of("results") == []


async def test_hanging_renewal_does_not_outlive_the_lease() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=200)
    coordinator.always["renew"] = "hang"
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.returned, what="run stopped")
        assert executor.controls[task["task_id"]].stop_reason == "lease_lost"
        await wait_until(lambda: device_free(agent.snapshot()), what="device freed")
    assert coordinator.of("results") == []


async def test_successful_renewal_extends_the_local_deadline() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=150)
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: len(coordinator.of("renew")) >= 3, what="three renewals")
        coordinator.always["renew"] = "drop_before"
        failing_from = len(coordinator.of("renew"))
        await wait_until(lambda: task["task_id"] in executor.returned, what="run stopped")
        assert len(coordinator.of("renew")) > failing_from
    assert coordinator.of("results") == []


async def test_cancel_requested_stops_the_run_and_reports_cancelled() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=150)
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        coordinator.cancel_requested.add(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
        assert executor.controls[task["task_id"]].stop_reason == "cancel_requested"
    [result] = results_for(coordinator, task["task_id"])
    assert result["status"] == "cancelled"
    assert result["lease_id"] == task["lease_id"]
    assert result["failure_reason"] == "cancel_requested"


async def test_result_is_retried_until_answered() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    coordinator.fail_next("results", "drop_before", (503, "unavailable"), "drop_after")
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        executor.finish(task["task_id"])
        await wait_until(lambda: len(results_for(coordinator, task["task_id"])) >= 4, what="answered result")
        await wait_until(lambda: device_free(agent.snapshot()), what="device freed")
        reports = results_for(coordinator, task["task_id"])
        assert len(reports) == 4  # dropped, 503, processed-but-lost, replayed: then it stops
        assert all(report == reports[0] for report in reports), "retries are the identical report"
        # the report the fake recorded: `next` (eager dispatch) rides along, no part of it
        assert coordinator.results[(task["task_id"], 1)] == {k: v for k, v in reports[0].items() if k != "next"}


async def test_result_409_means_give_up() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    coordinator.fail_next("results", (409, "stale_attempt"))
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        executor.finish(task["task_id"])
        await wait_until(lambda: device_free(agent.snapshot()), what="device freed")
        polls = len(coordinator.of("claim"))
        await wait_until(lambda: len(coordinator.of("claim")) > polls, what="polling again")
    assert len(results_for(coordinator, task["task_id"])) == 1


async def test_a_step_change_renews_early_at_most_once_a_second() -> None:
    # A minute's lease renews on its own every 20 s: every renewal below is an early one.
    coordinator = FakeCoordinator(lease_ttl_ms=60_000)
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        control = executor.controls[task["task_id"]]
        assert coordinator.of("renew") == []

        publish(control, 0, "running", "open app")
        await wait_until(lambda: coordinator.of("renew"), timeout=0.5, what="an early renewal")
        first = coordinator.of("renew")[0]
        assert first.body["progress"] == {"step_index": 0, "status": "running", "summary": "open app"}

        for step in (1, 2, 3):  # three steps well within a second: one renewal, with the last
            publish(control, step, "running", f"step {step}")
        await wait_until(lambda: len(coordinator.of("renew")) >= 2, timeout=2.0, what="the next early renewal")
        second = coordinator.of("renew")[1]
        assert second.body["progress"]["step_index"] == 3
        assert second.at - first.at >= lease_run.EARLY_RENEW_MIN_GAP_S - 0.01
        assert second.at - first.at < lease_run.EARLY_RENEW_MIN_GAP_S + 0.5

        publish(control, 3, "succeeded", "step 3")  # the step's status counts as a change too
        await wait_until(lambda: len(coordinator.of("renew")) >= 3, timeout=2.0, what="a renewal for the status")
        third = coordinator.of("renew")[2]
        assert third.body["progress"]["status"] == "succeeded"
        assert third.at - second.at >= lease_run.EARLY_RENEW_MIN_GAP_S - 0.01
        assert len(coordinator.of("renew")) == 3  # nothing changed since: nothing more sent

        executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
    assert len(coordinator.of("renew")) == 3


async def test_a_failure_reports_the_last_steps_the_run_published_as_they_ended() -> None:
    """The coordinator's stored progress may lag a failure (renewals carry it at most once a
    second), so the result itself names the last steps, each as it ended, for the run's report."""
    coordinator = FakeCoordinator(lease_ttl_ms=150)
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        control = executor.controls[task["task_id"]]
        for index in range(7):
            publish(control, index, "running", f"step {index}")
            publish(control, index, "failed" if index == 6 else "succeeded", f"step {index}")
        executor.finish(task["task_id"], Outcome("failed", "assertion_failed",
                                                 {"failed_step": 6, "error": "text not on screen"}))
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
    [result] = results_for(coordinator, task["task_id"])
    assert result["metadata"]["last_steps"] == [
        {"step_index": index, "status": "failed" if index == 6 else "succeeded", "summary": f"step {index}"}
        for index in range(2, 7)]
    assert result["metadata"]["error"] == "text not on screen"
