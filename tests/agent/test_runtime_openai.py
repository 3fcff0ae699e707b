"""The OpenAI-compatible planner against a fake chat-completions server."""

from __future__ import annotations

import json
import logging

import pytest

from agent.runtime import (
    Action,
    Observation,
    OpenAIPlanner,
    Progress,
    RunControl,
    Task,
    TaskRunner,
)
from agent.runtime.errors import PlannerError
from agent.runtime.openai_planner import parse_reply
from agent.runtime.sim import SimDriver
from tests.agent.fake_llm import FakeLLM

pytestmark = pytest.mark.anyio

KEY = "sk-test-do-not-log-0123456789"
TAP_AIRPLANE = '{"action": "tap", "text": "Airplane mode"}'


def test_parse_reply_accepts_bare_fenced_and_wrapped_json() -> None:
    assert parse_reply(TAP_AIRPLANE) == Action("tap", selector="Airplane mode")
    assert parse_reply('Sure!\n```json\n{"action": "launch", "app": "settings"}\n```\n') == Action(
        "launch", app="settings"
    )
    assert parse_reply('I will tap it: {"action": "tap", "x": 540.4, "y": "290"} ok') == Action("tap", x=540, y=290)
    assert parse_reply('{"action": "done", "reason": "on", "reasoning": "extra keys are fine"}') == Action(
        "done", reason="on"
    )


@pytest.mark.parametrize(
    "reply",
    [
        "tap the airplane switch",
        "```json\n{not json}\n```",
        '{"action": "explode"}',
        '{"action": "tap"}',
        '["tap"]',
        '{"action": "assert_text", "text": "x"}',  # a workflow step, not a planner action
    ],
)
def test_parse_reply_rejects_what_is_not_an_action(reply: str) -> None:
    with pytest.raises(PlannerError):
        parse_reply(reply)


async def test_request_carries_goal_screen_text_and_elements_but_no_screenshot() -> None:
    fake = FakeLLM([TAP_AIRPLANE])
    phone = SimDriver("p1")
    await phone.launch_app("settings")
    screen = await phone.observe(screenshot=True)
    assert screen.screenshot  # there is one to leak, and it must not be sent
    async with OpenAIPlanner("http://llm.test/v1/", "tiny-model", KEY, transport=fake.transport()) as planner:
        action = await planner.next_action("Turn on airplane mode", screen, ())
    assert action == Action("tap", selector="Airplane mode")

    (request,) = fake.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    body = request["body"]
    assert body["model"] == "tiny-model"
    prompt = body["messages"][-1]["content"]
    assert "Goal: Turn on airplane mode" in prompt
    assert "Airplane mode\nOff" in prompt  # the screen text
    assert '- "Airplane mode" id=settings:id/airplane_mode at (540, 290) checked=false' in prompt
    raw = json.dumps(body)
    assert "PNG" not in raw and "image" not in raw and "children" not in raw


async def test_no_key_means_no_authorization_header() -> None:
    fake = FakeLLM(['{"action": "done"}'])
    async with OpenAIPlanner("http://llm.test/v1", "m", "", transport=fake.transport()) as planner:
        await planner.next_action("g", await SimDriver("p").observe(), ())
    assert "authorization" not in fake.requests[0]["headers"]


async def test_full_run_against_a_real_local_server() -> None:
    fake = FakeLLM(
        [
            '{"action": "launch", "app": "settings"}',
            f"```json\n{TAP_AIRPLANE}\n```",
            '{"action": "done", "reason": "airplane mode is on"}',
        ]
    )
    phone = SimDriver("p1")
    progress: list[Progress] = []
    with fake.serve() as base_url:
        async with OpenAIPlanner(base_url, "tiny-model", KEY) as planner:
            outcome = await TaskRunner(planner).run(Task("Turn on airplane mode"), phone, RunControl(progress.append))
    assert outcome.status == "succeeded" and outcome.metadata == {"steps": 2}
    assert phone.toggles["Airplane mode"] is True
    assert len(fake.requests) == 3
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in fake.requests)
    # Each turn shows the model what happened so far.
    assert "1. launch settings (ok)" in fake.requests[2]["body"]["messages"][-1]["content"]
    assert progress[-1] == Progress(2, "succeeded", "done: airplane mode is on")


async def test_malformed_replies_are_failed_steps_then_planner_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake = FakeLLM(["I cannot decide", "```json\n{oops}\n```", '{"action": "teleport"}'])
    progress: list[Progress] = []
    phone = SimDriver("p1")
    async with OpenAIPlanner("http://llm.test/v1", "m", KEY, transport=fake.transport()) as planner:
        outcome = await TaskRunner(planner, max_planner_errors=3).run(
            Task("Turn on airplane mode"), phone, RunControl(progress.append)
        )
    assert (outcome.status, outcome.failure_reason) == ("failed", "planner_error")
    assert outcome.metadata["steps"] == 3
    assert [(p.step_index, p.status) for p in progress] == [(0, "failed"), (1, "failed"), (2, "failed")]
    assert progress[0].summary.startswith("planner error:")
    assert phone.actions == []
    assert KEY not in caplog.text and KEY not in repr(outcome) and KEY not in repr(planner)


async def test_http_errors_are_failed_steps_and_the_run_recovers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake = FakeLLM([500, '{"action": "launch", "app": "settings"}', 503, TAP_AIRPLANE, '{"action": "done"}'])
    phone = SimDriver("p1")
    progress: list[Progress] = []
    async with OpenAIPlanner("http://llm.test/v1", "m", KEY, transport=fake.transport()) as planner:
        outcome = await TaskRunner(planner).run(Task("Turn on airplane mode"), phone, RunControl(progress.append))
    assert outcome.status == "succeeded" and outcome.metadata["steps"] == 4  # 2 failed turns count
    assert phone.toggles["Airplane mode"] is True
    assert [p.summary for p in progress if p.status == "failed"] == [
        "planner error: HTTP 500 from the model server",
        "planner error: HTTP 503 from the model server",
    ]
    assert KEY not in caplog.text


async def test_only_http_errors_end_in_planner_error_and_unreachable_server_too() -> None:
    fake = FakeLLM([500, 500])
    async with OpenAIPlanner("http://llm.test/v1", "m", KEY, transport=fake.transport()) as planner:
        outcome = await TaskRunner(planner, max_planner_errors=2).run(Task("g"), SimDriver("p1"), RunControl())
    assert outcome.failure_reason == "planner_error" and "HTTP 500" in outcome.metadata["error"]

    with FakeLLM([]).serve() as base_url:
        pass  # the server is gone: its port now refuses connections
    async with OpenAIPlanner(base_url, "m", KEY) as planner:
        with pytest.raises(PlannerError, match="request failed: ConnectError"):
            await planner.next_action("g", Observation.from_tree((await SimDriver("p").observe()).tree), ())
