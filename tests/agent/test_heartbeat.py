"""The agent's heartbeat loop (agent/heartbeat.py) against a MockTransport coordinator and a
hand-driven executor: the snapshot, the interval, draining, and enrolling again."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from agent.retry import RetryPolicy
from tests.agent.host_fakes import (
    FakeCoordinator,
    FakeExecutor,
    Running,
    make_agent,
    results_for,
    wait_until,
)

pytestmark = pytest.mark.anyio


async def test_heartbeat_sends_complete_snapshot_and_marks_running_device_busy() -> None:
    coordinator = FakeCoordinator()
    executor = FakeExecutor(("phone-1", "phone-2"))
    agent, client = make_agent(coordinator, executor)
    async with Running(agent, client):
        await wait_until(lambda: coordinator.of("heartbeat"), what="first heartbeat")
        first = coordinator.of("heartbeat")[0]
        assert first.method == "PUT"
        assert first.path == "/internal/v1/hosts/host-a/heartbeat"
        instance_id = first.body["agent"]["instance_id"]
        assert instance_id.startswith("ai_")  # this process's own, the same in every heartbeat
        assert {h.body["agent"]["instance_id"] for h in coordinator.of("heartbeat")} == {instance_id}
        assert first.body == {
            "devices": [
                {"device_id": d, "driver": "sim", "status": "available",
                 "attributes": {"model": "Tether Sim"}, "labels": {"site": "berlin"}}
                for d in ("phone-1", "phone-2")
            ],
            "agent": {"version": "test", "hostname": "lab-7", "instance_id": instance_id,
                      "capabilities": {"workflows": ["note-smoke"], "planners": ["scripted"]}},
        }
        task = coordinator.assign("phone-2")
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        await wait_until(
            lambda: {"phone-1": "available", "phone-2": "busy"} in coordinator.heartbeat_statuses(),
            what="busy heartbeat",
        )
        executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result")
        seen = len(coordinator.of("heartbeat"))
        await wait_until(
            lambda: coordinator.heartbeat_statuses()[seen:]
            and coordinator.heartbeat_statuses()[-1] == {"phone-1": "available", "phone-2": "available"},
            what="device free again",
        )


async def test_heartbeat_reports_what_the_executor_can_run_now() -> None:
    """Capabilities are read for every heartbeat: a workflow added meanwhile is in the next one."""
    coordinator = FakeCoordinator()
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor, heartbeat_interval_s=0.05)
    async with Running(agent, client):
        await wait_until(lambda: coordinator.of("heartbeat"), what="first heartbeat")
        executor.can_run = {"workflows": ["note-smoke", "settings-tour"], "planners": ["scripted"]}
        await wait_until(
            lambda: coordinator.of("heartbeat")[-1].body["agent"]["capabilities"]["workflows"]
            == ["note-smoke", "settings-tour"],
            what="a heartbeat listing the new workflow",
        )


async def test_heartbeat_repeats_every_interval() -> None:
    coordinator = FakeCoordinator()
    agent, client = make_agent(coordinator, FakeExecutor(), heartbeat_interval_s=0.05)
    async with Running(agent, client):
        await wait_until(lambda: len(coordinator.of("heartbeat")) >= 4, what="four heartbeats")
    times = [call.at for call in coordinator.of("heartbeat")]
    assert all(later - earlier >= 0.04 for earlier, later in itertools.pairwise(times))


async def test_heartbeat_network_errors_back_off_and_recover() -> None:
    coordinator = FakeCoordinator()
    coordinator.fail_next("heartbeat", "drop_before", "drop_before", (500, "internal_error"))
    coordinator.heartbeat_interval_s = 9
    agent, client = make_agent(coordinator, FakeExecutor(), heartbeat_interval_s=10)
    async with Running(agent, client):
        # The agent follows the interval of an answer: one got through.
        await wait_until(lambda: agent.heartbeat_interval_s == 9, what="a heartbeat got through")
    assert len(coordinator.of("heartbeat")) == 4


async def test_heartbeat_follows_the_interval_the_coordinator_answers() -> None:
    coordinator = FakeCoordinator()
    coordinator.fail_next("heartbeat", (409, "device_conflict"))  # no usable answer yet
    # What the coordinator answers next, set by each pause: a normal value, one too fast, one
    # too slow, a non-number (ignored: the last interval stays), then a normal one again.
    answers = iter([15, 0.01, 10_000, "soon", 20])
    pauses: list[float] = []

    async def pause(_: asyncio.Event, seconds: float) -> None:
        pauses.append(seconds)
        coordinator.heartbeat_interval_s = next(answers, None)
        if len(pauses) == 6:
            await asyncio.Event().wait()  # hold the loop here until shutdown cancels it

    agent, client = make_agent(coordinator, FakeExecutor(), heartbeat_interval_s=0.2, pause=pause)
    async with Running(agent, client):
        await wait_until(lambda: len(pauses) == 6, what="six heartbeat pauses")
    # The agent's own setting only until the first answer; then the coordinator's, within [1, 300] s.
    assert pauses == [0.2, 15.0, 1.0, 300.0, 300.0, 20.0]
    assert len(coordinator.of("heartbeat")) == 6


async def test_draining_is_logged_once_per_change_and_the_host_keeps_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent.host")
    coordinator = FakeCoordinator()
    coordinator.draining = False
    executor = FakeExecutor(("phone-1", "phone-2"))
    agent, client = make_agent(coordinator, executor, heartbeat_interval_s=0.02, poll_wait_s=0)

    def said(text: str) -> int:
        return sum(text in record.getMessage() for record in caplog.records)

    async with Running(agent, client):
        task = coordinator.assign()
        await wait_until(lambda: task["task_id"] in executor.started, what="run start")
        coordinator.draining = True
        await wait_until(lambda: agent.draining, what="draining seen")
        heartbeats, claims = len(coordinator.of("heartbeat")), len(coordinator.of("claim"))
        # Still heartbeating and polling (the coordinator just assigns nothing), and the running
        # task still finishes and is reported.
        await wait_until(lambda: len(coordinator.of("heartbeat")) >= heartbeats + 3, what="heartbeats go on")
        await wait_until(lambda: len(coordinator.of("claim")) >= claims + 3, what="polls go on")
        executor.finish(task["task_id"])
        await wait_until(lambda: results_for(coordinator, task["task_id"]), what="result while draining")
        assert said("this host is draining") == 1
        coordinator.draining = False
        await wait_until(lambda: not agent.draining, what="draining over")
        heartbeats = len(coordinator.of("heartbeat"))
        await wait_until(lambda: len(coordinator.of("heartbeat")) >= heartbeats + 3, what="more heartbeats")
    assert said("this host is draining") == 1
    assert said("no longer draining") == 1
    assert [r["status"] for r in results_for(coordinator, task["task_id"])] == ["succeeded"]


async def test_unknown_device_makes_a_managed_host_enroll_again_once_per_rejection_with_backoff() -> None:
    coordinator = FakeCoordinator()
    coordinator.always["heartbeat"] = (409, "unknown_device")  # a coordinator that keeps refusing
    executor = FakeExecutor()
    pauses: list[float] = []

    async def pause(_: asyncio.Event, seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 6:
            await asyncio.Event().wait()  # hold the loop here until shutdown cancels it

    policy = RetryPolicy(base_s=0.01, cap_s=1.0, rng=lambda: 1.0)  # no jitter: the schedule is exact
    agent, client = make_agent(
        coordinator, executor, managed=True, heartbeat_interval_s=0.05, retry_policy=policy, pause=pause
    )
    async with Running(agent, client):
        await wait_until(lambda: len(pauses) == 6, what="six rejected heartbeats")
        # One enrollment per rejected heartbeat, never more; the pauses between them back off
        # (capped by the heartbeat interval) instead of hammering the coordinator.
        assert executor.reenrolled == len(coordinator.of("heartbeat")) == 6
    assert pauses == [0.01, 0.02, 0.04, 0.05, 0.05, 0.05]


async def test_unknown_device_on_a_static_host_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agent.host")
    coordinator = FakeCoordinator()
    coordinator.always["heartbeat"] = (409, "unknown_device")
    executor = FakeExecutor()
    agent, client = make_agent(coordinator, executor, heartbeat_interval_s=0.02)  # managed=False: legacy
    async with Running(agent, client):
        await wait_until(lambda: len(coordinator.of("heartbeat")) >= 3, what="heartbeats go on")
    assert executor.reenrolled == 0
    assert "heartbeat rejected" in caplog.text
