"""A live session on a sim phone, against a MockTransport coordinator: each command performed,
its screen uploaded before its answer, a failed action answered in one line while the session
goes on, and the session's end, cancel and lost lease as the contract says."""

from __future__ import annotations

from typing import Any

import pytest

from agent.executor import RuntimeExecutor
from agent.runtime import DeviceManager, DeviceSpec, ScriptedPlanner, TaskRunner
from agent.runtime.driver import make_node
from agent.runtime.session import MAX_ELEMENTS, elements_of
from agent.session_run import poll_wait_s, screen_name
from tests.agent.host_fakes import FakeCoordinator, Running, device_free, make_agent, results_for, wait_until

pytestmark = pytest.mark.anyio

SETTINGS_ICON = {"action": "tap", "x": 280, "y": 550}  # the sim's home screen: Settings


async def _sim_executor() -> RuntimeExecutor:
    manager = await DeviceManager.discover([DeviceSpec("sim", "phone-1")])
    manager.bind({"phone-1": "phone-1"})
    return RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), None)


def _texts(answer: dict[str, Any]) -> list[str]:
    return [element["text"] for element in answer["observation"]["elements"]]


async def test_a_session_runs_commands_in_order_answers_each_with_its_screen_and_ends_as_told() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=3000)
    agent, client = make_agent(coordinator, await _sim_executor())
    async with Running(agent, client):
        await wait_until(lambda: coordinator.of("heartbeat"), what="a heartbeat")
        assert coordinator.of("heartbeat")[-1].body["agent"]["capabilities"]["sessions"] is True
        task = coordinator.assign(kind="session", session={"idle_timeout_s": 300, "max_duration_s": 3600})
        tid = task["task_id"]
        tap = coordinator.command(tid, SETTINGS_ICON)
        blind = coordinator.command(tid, {"action": "tap", "text": "Wi-Fi", "observe": False})
        broken = coordinator.command(tid, {"action": "tap", "x": 1})
        no_key = coordinator.command(tid, {"action": "key", "key": "volume_up"})
        look = coordinator.command(tid, {"action": "observe"})
        await wait_until(lambda: look in coordinator.answers, what="the five answers")

        answer = coordinator.answers[tap]
        assert answer["status"] == "done" and answer["error"] is None
        assert answer["observation"]["screen"] == screen_name(tap)
        assert (answer["observation"]["width"], answer["observation"]["height"]) == (1080, 1920)
        assert "Airplane mode" in _texts(answer), "the tap opened Settings: the screen after it shows so"
        uploads = {call.path.rsplit("/", 1)[-1]: call for call in coordinator.of("artifacts")}
        assert uploads[screen_name(tap)].body.startswith(b"\x89PNG")
        assert uploads[screen_name(tap)].headers["content-type"] == "image/png"
        assert coordinator.answers[blind]["status"] == "done" and coordinator.answers[blind]["observation"] is None
        assert screen_name(blind) not in uploads
        for failed in (broken, no_key):
            error = coordinator.answers[failed]["error"]
            assert coordinator.answers[failed]["status"] == "failed" and "\n" not in error and error
        wifi_row = next(e for e in coordinator.answers[look]["observation"]["elements"] if e["text"] == "Wi-Fi")
        assert wifi_row["clickable"] is True and wifi_row["id"] == "settings:id/wifi"
        assert results_for(coordinator, tid) == [], "the session goes on after failed commands"

        coordinator.end(tid, "idle_timeout")
        await wait_until(lambda: results_for(coordinator, tid), what="the result")
        result = results_for(coordinator, tid)[0]
        assert result["status"] == "succeeded" and result["metadata"]["end_reason"] == "idle_timeout"
        await wait_until(lambda: device_free(agent.snapshot()), what="the device free again")
    answered = [c.body for c in coordinator.of("commands") if c.body["answers"]]
    delivered = [a["command_id"] for body in answered for a in body["answers"]]
    assert sorted(delivered) == sorted({tap, blind, broken, no_key, look}), "each answer delivered once"


async def test_an_end_without_a_reason_is_ended_and_a_cancel_is_cancelled() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=3000)
    agent, client = make_agent(coordinator, await _sim_executor())
    async with Running(agent, client):
        ended = coordinator.assign(kind="session")["task_id"]
        await wait_until(lambda: coordinator.of("commands"), what="the first poll")
        coordinator.end(ended)
        await wait_until(lambda: results_for(coordinator, ended), what="the ended session's result")
        cancelled = coordinator.assign(kind="session")["task_id"]
        coordinator.command(cancelled, {"action": "observe"})
        await wait_until(lambda: coordinator.answers, what="an answer")
        coordinator.cancel(cancelled)
        await wait_until(lambda: results_for(coordinator, cancelled), what="the cancelled session's result")
    assert results_for(coordinator, ended)[0]["metadata"]["end_reason"] == "ended"
    assert results_for(coordinator, cancelled)[0]["status"] == "cancelled"


async def test_a_409_on_a_poll_ends_the_loop_and_reports_nothing() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=3000)
    agent, client = make_agent(coordinator, await _sim_executor())
    async with Running(agent, client):
        task = coordinator.assign(kind="session")
        await wait_until(lambda: coordinator.of("commands"), what="the first poll")
        coordinator.renew_conflict[task["lease_id"]] = "lease_expired"
        coordinator.command(task["task_id"], {"action": "observe"})
        await wait_until(lambda: device_free(agent.snapshot()), what="the device free again")
        polls = len(coordinator.of("commands"))
    assert coordinator.of("results") == []
    assert len(coordinator.of("commands")) == polls, "no poll after the 409"


async def test_the_polls_keep_the_lease_and_the_renewal_loop_stays_quiet() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=9000)  # a poll waits 1 s, under half the 3 s renewal interval
    agent, client = make_agent(coordinator, await _sim_executor())
    async with Running(agent, client):
        tid = coordinator.assign(kind="session")["task_id"]
        await wait_until(lambda: len(coordinator.of("commands")) >= 3, what="three polls")
        assert coordinator.renewals_of(tid) == []
        coordinator.end(tid)
        await wait_until(lambda: results_for(coordinator, tid), what="the result")


def test_a_poll_waits_under_the_renewal_interval_and_never_zero() -> None:
    assert poll_wait_s(60_000, 1 / 3) == 9
    assert poll_wait_s(600_000, 1 / 3) == 25
    assert poll_wait_s(1_000, 1 / 3) == 1


def test_the_element_list_holds_what_can_be_read_or_tapped_and_at_most_500() -> None:
    rows = [make_node(f"row {i}", bounds=(0, i, 10, i + 1)) for i in range(MAX_ELEMENTS + 20)]
    blank = make_node(bounds=(0, 0, 10, 10), class_name="LinearLayout")
    flat = make_node("flat", bounds=(5, 5, 5, 9))
    tree = make_node(bounds=(0, 0, 10, 600), children=[blank, flat, *rows])
    elements = elements_of(tree)
    assert len(elements) == MAX_ELEMENTS
    assert elements[0] == {"text": "row 0", "id": "", "bounds": [0, 0, 10, 1], "clickable": False}
    assert screen_name("c_1:2") == "screen-c_1_2.png"


async def test_a_shutdown_stops_the_loop_at_once_and_reports_the_session_failed() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=3000)
    agent, client = make_agent(coordinator, await _sim_executor(), shutdown_grace_s=0.1)
    async with Running(agent, client) as running:
        tid = coordinator.assign(kind="session")["task_id"]
        look = coordinator.command(tid, {"action": "observe"})
        await wait_until(lambda: look in coordinator.answers, what="the answer")
        assert await running.stop() == 0
    result = results_for(coordinator, tid)[0]
    assert (result["status"], result["failure_reason"]) == ("failed", "shutdown")


async def test_a_poll_answered_204_by_a_stopping_coordinator_is_asked_again() -> None:
    coordinator = FakeCoordinator(lease_ttl_ms=3000)
    agent, client = make_agent(coordinator, await _sim_executor())
    async with Running(agent, client):
        tid = coordinator.assign(kind="session")["task_id"]
        await wait_until(lambda: coordinator.of("commands"), what="the first poll")
        coordinator.fail_next("commands", (204, "stopping"))
        look = coordinator.command(tid, {"action": "observe"})
        await wait_until(lambda: look in coordinator.answers, what="the answer, after the 204")
        assert results_for(coordinator, tid) == []
        coordinator.end(tid)
        await wait_until(lambda: results_for(coordinator, tid), what="the result")
    assert results_for(coordinator, tid)[0]["status"] == "succeeded"
