"""The agent's claim loop, runs and shutdown against a MockTransport coordinator and a
hand-driven executor (its heartbeats: test_heartbeat.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from agent.answers import Assignment
from agent.executor import RuntimeExecutor
from agent.host import EXIT_FATAL, EXIT_OK
from agent.runtime import (
    DeviceManager,
    DeviceNotFound,
    Outcome,
    RunControl,
    ScriptedPlanner,
    TaskRunner,
    parse_device_specs,
)
from tests.agent.fake_adb import FakeAdb
from tests.agent.host_fakes import (
    FakeCoordinator,
    FakeExecutor,
    Running,
    device_free,
    make_agent,
    results_for,
    wait_until,
)

pytestmark = pytest.mark.anyio


async def test_goal_run_reports_the_runner_outcome_and_metadata() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        executor.finish(task["task_id"], Outcome("failed", "max_steps_exceeded", {"steps": 10}))
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
    # The task's own failure: no "retryable" in the body at all (it is only ever sent as true).
    assert results_for(coordinator, task["task_id"]) == [
        {"task_id": task["task_id"], "attempt": 1, "lease_id": task["lease_id"], "status": "failed",
         "failure_reason": "max_steps_exceeded", "metadata": {"steps": 10}, "next": True}
    ]


async def test_a_retryable_outcome_is_reported_retryable_and_the_task_status_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        lost = Outcome.retryable_failure("device_lost", {"steps": 2, "error": "device offline"})
        executor.finish(task["task_id"], lost)
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
        await wait_until(lambda: "task is now queued" in caplog.text, what="task status logged")
    assert results_for(coordinator, task["task_id"]) == [
        {"task_id": task["task_id"], "attempt": 1, "lease_id": task["lease_id"], "status": "failed",
         "failure_reason": "device_lost", "metadata": {"steps": 2, "error": "device offline"}, "retryable": True}
    ]
    [line] = [r for r in caplog.records if "task is now queued" in r.getMessage()]
    assert line.levelno == logging.INFO and "retryable" in line.getMessage()


async def test_claim_lost_response_is_retried_with_same_claim_id_and_runs_once() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    # The first poll never arrives; the second is handled (the assignment is bound to its
    # claim_id) but its response is lost; the retry must get that same assignment back.
    coordinator.fail_next("claim", "drop_before", "drop_after")
    task = coordinator.assign()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
        await wait_until(lambda: len(coordinator.of("claim")) >= 4, what="a later claim")
    claims = coordinator.of("claim")
    ids = [call.body["claim_id"] for call in claims]
    assert ids[0] == ids[1] == ids[2], "retries after network errors must reuse the claim_id"
    assert ids[3] != ids[2], "a new claim_id only after an answer"
    assert claims[0].params["wait_s"] == "1"
    assert claims[0].path == "/internal/v1/hosts/host-a/claim"
    assert executor.started == [task["task_id"]]


async def test_claim_5xx_is_retried_with_same_claim_id() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    coordinator.fail_next("claim", (503, "unavailable"), (502, "bad_gateway"))
    task = coordinator.assign()
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
    ids = [call.body["claim_id"] for call in coordinator.of("claim")[:3]]
    assert len(set(ids)) == 1


async def test_empty_answers_get_fresh_claim_ids() -> None:
    coordinator = FakeCoordinator()
    agent, client = make_agent(coordinator, FakeExecutor(), poll_wait_s=0)
    async with Running(agent, client):
        await wait_until(lambda: len(coordinator.of("claim")) >= 3, what="three polls")
    ids = [call.body["claim_id"] for call in coordinator.of("claim")]
    assert len(set(ids)) == len(ids)


async def test_no_poll_while_every_device_is_busy() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor, poll_wait_s=0)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        polls = len(coordinator.of("claim"))
        # Let the loops run a while (heartbeats keep coming) with the only device busy.
        await wait_until(lambda: len(coordinator.of("heartbeat")) >= 3, what="heartbeats")
        assert len(coordinator.of("claim")) == polls
        executor.finish(task["task_id"])
        await wait_until(lambda: len(coordinator.of("claim")) > polls, what="polling again")


async def test_assignment_for_busy_device_waits_and_keeps_its_lease() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=300)
    executor = FakeExecutor(("phone-1", "phone-2"))
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        first = coordinator.assign("phone-1")
        await wait_until(lambda: first["task_id"] in executor.started, what="first run")
        second = coordinator.assign("phone-1")  # phone-2 idle, so the agent is still polling
        await wait_until(lambda: not coordinator.pending, what="second claimed")
        await wait_until(
            lambda: coordinator.renewals_of(second["task_id"]),
            what="renewal of the waiting assignment",
        )
        assert second["task_id"] not in executor.started
        executor.finish(first["task_id"])
        await wait_until(lambda: second["task_id"] in executor.started, what="second run")
        executor.finish(second["task_id"])
        await wait_until(lambda: results_for(coordinator, second["task_id"]), what="second result")
    assert executor.max_running_per_device == 1
    assert [r["status"] for r in results_for(coordinator, first["task_id"])] == ["succeeded"]


@pytest.mark.parametrize("found_missing", ["at claim", "at run start"])
async def test_assignment_for_unknown_device_is_reported_failed(found_missing: str) -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    device_id = "phone-9" if found_missing == "at claim" else "phone-1"

    async def unplugged(*_: object) -> None:
        raise DeviceNotFound(device_id)  # bound when claimed, dropped before the run began

    if found_missing == "at run start":
        executor.on_start = unplugged
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign(device_id)
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
        await wait_until(lambda: device_free(agent.snapshot()), what="device freed")
    [result] = results_for(coordinator, task["task_id"])
    # One verdict, whoever finds the device missing: the device went away, so another attempt.
    assert (result["status"], result["failure_reason"], result["metadata"], result.get("retryable")) == (
        "failed", "device_gone", {"device_id": device_id}, True
    )
    if found_missing == "at claim":
        assert executor.started == []


async def test_executor_crash_is_reported_failed_and_frees_the_device() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()

    async def boom(*_: object) -> None:
        raise RuntimeError("driver exploded")

    executor.on_start = boom
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
        await wait_until(lambda: device_free(agent.snapshot()), what="device freed")
    [result] = results_for(coordinator, task["task_id"])
    assert (result["status"], result["failure_reason"]) == ("failed", "agent_error")
    assert "retryable" not in result


async def test_unauthorized_ends_the_agent_with_nonzero_exit() -> None:
    coordinator = FakeCoordinator()
    coordinator.always["heartbeat"] = (401, "unauthorized")
    agent, client = make_agent(coordinator, FakeExecutor())
    runner = Running(agent, client)
    async with runner:
        assert await asyncio.wait_for(runner.task, 5) == EXIT_FATAL


async def test_shutdown_stops_claiming_and_lets_running_work_finish() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=150)
    executor = FakeExecutor(("phone-1", "phone-2"))
    agent, client = make_agent(coordinator, executor)
    runner = Running(agent, client)
    async with runner:
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        runner.shutdown.set()
        polls = len(coordinator.of("claim"))
        later = coordinator.assign("phone-2")
        await wait_until(lambda: len(coordinator.of("renew")) >= 2, what="renewals continue")
        assert not runner.task.done()
        executor.finish(task["task_id"])
        assert await asyncio.wait_for(runner.task, 5) == EXIT_OK
    assert len(coordinator.of("claim")) == polls
    assert later["task_id"] not in executor.started
    assert [r["status"] for r in results_for(coordinator, task["task_id"])] == ["succeeded"]


async def test_shutdown_grace_expiry_stops_the_run_and_reports_what_it_returns() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor, shutdown_grace_s=0.1)
    runner = Running(agent, client)
    async with runner:
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        assert await runner.stop() == EXIT_OK
    assert executor.controls[task["task_id"]].stop_reason == "shutdown"
    assert executor.returned[task["task_id"]].status == "cancelled"  # what the runner said
    [result] = results_for(coordinator, task["task_id"])
    # Not the task's fault: failed, retryable, so the coordinator runs it again elsewhere.
    assert (result["status"], result["failure_reason"], result.get("retryable")) == ("failed", "shutdown", True)


async def test_shutdown_reports_a_run_still_waiting_for_its_device_retryable() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor(("phone-1", "phone-2"))
    agent, client = make_agent(coordinator, executor, shutdown_grace_s=0.1)
    runner = Running(agent, client)
    async with runner:
        running = coordinator.assign("phone-1")
        await wait_until(lambda: running["task_id"] in executor.started, what="run start")
        waiting = coordinator.assign("phone-1")  # phone-2 idle, so the agent claims it at once
        await wait_until(lambda: not coordinator.pending, what="second claimed")
        assert await runner.stop() == EXIT_OK
    assert waiting["task_id"] not in executor.started
    for task in (running, waiting):
        [result] = results_for(coordinator, task["task_id"])
        assert (result["status"], result["failure_reason"], result.get("retryable")) == ("failed", "shutdown", True)
    assert results_for(coordinator, waiting["task_id"])[0]["metadata"] == {"steps": 0}


async def test_a_run_that_finishes_during_shutdown_reports_what_it_did() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor()

    async def finish_anyway(assignment: Assignment, control: RunControl) -> None:
        await control.wait_stopped()
        executor.finish(assignment.task_id, Outcome("failed", "assertion_failed", {"steps": 3}))

    executor.on_start = finish_anyway
    agent, client = make_agent(coordinator, executor, shutdown_grace_s=0.05)
    runner = Running(agent, client)
    async with runner:
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        assert await runner.stop() == EXIT_OK
    # The run ended on its own terms (its task failed): not turned into a retryable shutdown; and
    # a stopping agent asks for no next assignment.
    [result] = results_for(coordinator, task["task_id"])
    assert (result["status"], result["failure_reason"], "retryable" in result) == ("failed", "assertion_failed", False)
    assert "next" not in result


async def test_a_result_answer_carrying_the_next_assignment_runs_it_without_a_claim() -> None:
    """Eager dispatch: a busy device's jobs follow each other with no claim between them, while
    the claim loop keeps serving the other device."""
    coordinator = FakeCoordinator()
    coordinator.eager = True
    executor = FakeExecutor(("phone-1", "phone-2"))
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        first, other = coordinator.assign("phone-1"), coordinator.assign("phone-2")
        await wait_until(lambda: {first["task_id"], other["task_id"]} <= set(executor.started), what="claimed runs")
        chain = [coordinator.assign("phone-1") for _ in range(2)]  # no poll is open: both devices busy
        for done, following in zip([first, *chain], chain, strict=False):
            executor.finish(done["task_id"])
            await wait_until(lambda f=following: f["task_id"] in executor.started, what="next run")
        executor.finish(chain[-1]["task_id"])
        await wait_until(lambda: results_for(coordinator, chain[-1]["task_id"]), what="last result")
        # no claim took the chain: each came in the answer to the result before it
        assert [c["task_id"] for c in coordinator.claimed.values()] == [first["task_id"], other["task_id"]]
        # and phone-1, free again with nothing waiting, is served by the claim loop
        again = coordinator.assign("phone-1")
        await wait_until(lambda: again["task_id"] in executor.started, what="claimed again")
        executor.finish(again["task_id"])
        executor.finish(other["task_id"])
        await wait_until(lambda: results_for(coordinator, other["task_id"]), what="other result")
    assert executor.max_running_per_device == 1
    for task in (first, *chain, other):
        [result] = results_for(coordinator, task["task_id"])
        assert result["status"] == "succeeded" and result["next"] is True


class _StopsAtFirstResult(FakeCoordinator):
    """The agent is told to stop while its first result is on the way, whose answer is lost."""

    stop: asyncio.Event | None = None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self.stop is not None and not self.stop.is_set() and request.url.path.endswith("/results"):
            self.stop.set()
            self.fail_next("results", "drop_after")
        return await super().handle(request)


async def test_a_stopping_agent_asks_for_no_next_and_stops_one_that_came() -> None:
    coordinator = _StopsAtFirstResult()
    coordinator.eager = True
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor, shutdown_grace_s=0.5)
    runner = Running(agent, client)
    async with runner:
        first = coordinator.assign()
        await wait_until(lambda: first["task_id"] in executor.started, what="first run")
        following = coordinator.assign()
        coordinator.stop = runner.shutdown
        executor.finish(first["task_id"])
        assert await asyncio.wait_for(runner.task, 5) == EXIT_OK
    sent = results_for(coordinator, first["task_id"])
    # asked before the stop, and the retry in the stop asks again, so it is answered the next
    # assignment the first try dispatched: stopped before it starts, reported for another attempt
    assert len(sent) == 2 and all(body["next"] is True for body in sent)
    assert following["task_id"] not in executor.started
    [result] = results_for(coordinator, following["task_id"])
    assert (result["status"], result["failure_reason"], result.get("retryable")) == ("failed", "shutdown", True)


async def test_unplugged_adb_device_is_unavailable_until_plugged_back(tmp_path: Path) -> None:
    adb = FakeAdb(tmp_path)
    adb.set(devices=_adb_listing())  # HOST_AGENT_DEVICES=adb:emulator-5554, phone not attached
    manager = await DeviceManager.discover(parse_device_specs("adb:emulator-5554"), adb_path=adb.path)
    manager.bind({d.local_id: d.local_id for d in manager.local_devices()})  # each its own cloud id
    executor = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), None)
    coordinator = FakeCoordinator()
    agent, client = make_agent(coordinator, executor, device_refresh_s=0.02, heartbeat_interval_s=30)
    async with Running(agent, client):
        await wait_until(lambda: coordinator.heartbeat_statuses(), what="first heartbeat")
        assert coordinator.heartbeat_statuses()[0] == {"emulator-5554": "unavailable"}
        assert coordinator.of("claim") == []  # nothing could run: no poll for work

        adb.set(devices=_adb_listing("emulator-5554 device model:Pixel_7"))
        # Heartbeated on the change, not 30 s later; and the claim loop wakes up.
        await wait_until(
            lambda: coordinator.heartbeat_statuses()[-1] == {"emulator-5554": "available"}, what="available"
        )
        await wait_until(lambda: coordinator.of("claim"), what="polling for work")
        assert coordinator.of("heartbeat")[-1].body["devices"][0]["attributes"]["model"] == "Pixel_7"

        adb.set(devices=_adb_listing("emulator-5554 offline"))
        await wait_until(
            lambda: coordinator.heartbeat_statuses()[-1] == {"emulator-5554": "unavailable"}, what="unavailable again"
        )


def _adb_listing(*lines: str) -> str:
    return "List of devices attached\n" + "".join(f"{line}\n" for line in lines) + "\n"
