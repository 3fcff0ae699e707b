"""Live sessions, the coordinator's side (PROTOCOL.md, "Live sessions"): placed only where the
host runs sessions, commands relayed one at a time to the host's poll and answers back, every
error code of the operator routes, and each way a session ends, on real Redis and fakeredis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire
from coordinator.clock import ShiftedClock
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease
from tests.support import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

SESSIONS = {"capabilities": {"workflows": [], "sessions": True}}
# A wake-up must answer well before the wait runs out; this bounds how long a test waits for one.
WOKEN_WITHIN_S = 8


async def _session(api: Api, host: str = "host-a", device: str = "a1", **body: Any) -> dict[str, Any]:
    """A session running on ``device`` of ``host`` (a host that runs sessions): its assignment."""
    await api.heartbeat(host, [device], agent=SESSIONS)
    created = await api.create_task(kind="session", device_id=device, **body)
    assert created.status_code == 201, created.text
    return await claim_one(api, host)


async def _command(api: Api, task_id: str, action: dict[str, Any], wait_s: float = 0,
                   headers: dict[str, str] | None = None) -> Any:
    return await api.client.post(f"/api/v1/tasks/{task_id}/commands?wait_s={wait_s}", json={"action": action},
                                 headers=headers or api.admin_headers)


async def _poll(api: Api, assignment: dict[str, Any], answers: list[dict[str, Any]] | None = None,
                wait_s: float = 0, host: str = "host-a") -> Any:
    return await api.client.post(
        f"/internal/v1/hosts/{host}/leases/{assignment['lease_id']}/commands?wait_s={wait_s}",
        json={"task_id": assignment["task_id"], "attempt": assignment["attempt"], "answers": answers or []},
        headers=api.host_headers(host))


def _done(command_id: str, screen: str = "screen-1.png", **extra: Any) -> dict[str, Any]:
    return {"command_id": command_id, "status": "done", "error": None, "duration_ms": 12,
            "observation": {"screen": screen, "width": 1080, "height": 2400,
                            "elements": [{"text": "Wi-Fi", "bounds": [0, 310, 1080, 420]}]}, **extra}


async def _token(api: Api, name: str, scopes: list[str]) -> dict[str, str]:
    made = await api.admin("POST", "/api/v1/operator-tokens", json={"name": name, "scopes": scopes})
    assert made.status_code == 201, made.text
    return {"authorization": f"Bearer {made.json()['token']}"}


@pytest.fixture
async def twin(api: Api, api_factory: Any) -> AsyncIterator[Api]:
    """A second coordinator instance on the same deployment: another process's inbox."""
    async with api_factory(prefix=api.ctx.settings.key_prefix) as other:
        yield other


async def test_a_session_is_placed_only_on_a_host_that_runs_sessions(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"], agent={"capabilities": {"workflows": []}})
    created = (await api.create_task(kind="session", selector={"driver": "sim", "labels": {}})).json()
    assert created["max_attempts"] == 1 and created["session"]["idle_timeout_s"] == 300
    assert (await api.task(created["task_id"]))["waiting_reason"] == "no_capable_host"
    assert (await api.claim("host-a")).status_code == 204
    await api.heartbeat("host-b", ["b1"], agent=SESSIONS)
    assignment = await claim_one(api, "host-b")
    assert assignment["kind"] == "session" and assignment["device_id"] == "b1"
    assert assignment["session"] == {"idle_timeout_s": 300, "max_duration_s": 3600}


async def test_a_command_reaches_the_host_once_answered_and_the_first_answer_stands(api: Api) -> None:
    assignment = await _session(api)
    task_id = assignment["task_id"]
    sent = await _command(api, task_id, {"action": "tap", "x": 540, "y": 365})
    assert sent.status_code == 202 and sent.json()["status"] == "pending"
    command_id = sent.json()["command_id"]
    second = (await _command(api, task_id, {"action": "observe"})).json()["command_id"]

    polled = (await _poll(api, assignment)).json()
    assert polled["commands"] == [{"command_id": command_id, "action": {"action": "tap", "x": 540, "y": 365,
                                                                        "observe": True}}]
    assert polled["end_requested"] is False and polled["lease_ttl_ms"] > 0
    # Unanswered, it is delivered again; answered (with a foreign id beside it), the next comes.
    assert (await _poll(api, assignment)).json()["commands"][0]["command_id"] == command_id
    polled = (await _poll(api, assignment, [_done(command_id), _done("c_foreign")])).json()
    assert [c["command_id"] for c in polled["commands"]] == [second]
    await _poll(api, assignment, [_done(command_id, screen="other.png", status="failed", error="late")])

    answer = await api.admin("GET", f"/api/v1/tasks/{task_id}/commands/{command_id}?wait_s=0")
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "done" and body["round_trip_ms"] >= 0 and body["duration_ms"] == 12
    assert body["observation"]["screen_url"] == f"/api/v1/tasks/{task_id}/artifacts/screen-1.png"
    assert body["observation"]["elements"][0]["text"] == "Wi-Fi"
    assert (await api.admin("GET", f"/api/v1/tasks/{task_id}/commands/c_foreign")).status_code == 404

    log = (await api.admin("GET", f"/api/v1/tasks/{task_id}/commands?limit=1")).json()
    assert [c["command_id"] for c in log["commands"]] == [command_id] and log["commands"][0]["actor"] == "admin"
    rest = (await api.admin("GET", f"/api/v1/tasks/{task_id}/commands?cursor={log['next_cursor']}")).json()
    assert [c["command_id"] for c in rest["commands"]] == [second] and rest["next_cursor"] is None
    events = [e for e in await api.events(task_id) if e["type"] in ("command", "command_answered")]
    assert [(e["type"], e["command_id"], e["action"]) for e in events] == [
        ("command", command_id, "tap"), ("command", second, "observe"), ("command_answered", command_id, "tap")]
    assert events[-1]["screen"] == "screen-1.png" and events[-1]["actor"] == "admin"


async def test_a_command_wakes_the_hosts_poll_and_the_answer_the_operator_on_another_instance(
        api: Api, twin: Api) -> None:
    assignment = await _session(api)
    task_id = assignment["task_id"]
    poll = asyncio.ensure_future(_poll(twin, assignment, wait_s=10))
    # The operator's request waits on this instance, the host's poll on the other.
    request = asyncio.ensure_future(_command(api, task_id, {"action": "key", "key": "home"}, wait_s=30))
    polled = (await asyncio.wait_for(poll, WOKEN_WITHIN_S)).json()
    [command] = polled["commands"]
    assert command["action"]["key"] == "home"
    await _poll(twin, assignment, [_done(command["command_id"])])
    answered = await asyncio.wait_for(request, WOKEN_WITHIN_S)
    assert answered.status_code == 200 and answered.json()["command_id"] == command["command_id"]


async def test_a_lost_host_answers_a_waiting_request_session_ended_at_once(api: Api) -> None:
    assignment = await _session(api)
    task_id = assignment["task_id"]
    request = asyncio.ensure_future(_command(api, task_id, {"action": "observe"}, wait_s=30))
    # Until the request has queued its command (it then waits for the answer), the lease stays.
    async def queued() -> list[Any]:
        commands: list[Any] = (await api.admin("GET", f"/api/v1/tasks/{task_id}/commands")).json()["commands"]
        return commands

    await wait_until_async(queued, what="the command queued")
    await expire_lease(api, assignment)
    await api.sweep()
    answered = await asyncio.wait_for(request, WOKEN_WITHIN_S)
    assert answered.status_code == 409 and answered.json()["error"]["code"] == "session_ended"
    task = await api.task(task_id)
    assert task["status"] == "failed" and task["failure_reason"] == "lease_expired"


async def test_every_error_code_of_the_operator_routes(api: Api) -> None:
    goal = (await api.create_task(device_id="z9")).json()["task_id"]
    refused = await _command(api, goal, {"action": "observe"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "not_a_session"

    queued = (await api.create_task(kind="session", device_id="z9")).json()["task_id"]
    refused = await _command(api, queued, {"action": "observe"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_not_running"
    assert refused.json()["error"]["details"] == {"status": "queued"}
    assert (await _command(api, "t_none", {"action": "observe"})).status_code == 404

    for action, field in (({"action": "jump"}, "action"), ({"action": "tap", "x": 1}, "tap"),
                          ({"action": "type", "text": "a", "speed": 3}, "speed"), ({"action": "swipe"}, "x1")):
        refused = await _command(api, queued, action)
        assert refused.status_code == 400 and field in refused.json()["error"]["message"], refused.text
    assert (await _command(api, queued, {"action": "observe"}, wait_s=61)).status_code == 400
    extra = await api.admin("POST", f"/api/v1/tasks/{queued}/commands", json={"action": {"action": "observe"},
                                                                               "x": 1})
    assert extra.status_code == 400 and "'x'" in extra.json()["error"]["message"]

    submitter = await _token(api, "alice", ["submit"])
    other, reader = await _token(api, "bob", ["submit"]), await _token(api, "watcher", ["read"])
    await api.heartbeat("host-a", ["a1"], agent=SESSIONS)
    mine = (await api.client.post("/api/v1/tasks", json={"kind": "session", "device_id": "a1"},
                                  headers=submitter)).json()["task_id"]
    assignment = await claim_one(api, "host-a")
    for headers in (other, reader):
        refused = await _command(api, mine, {"action": "observe"}, headers=headers)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_scope"
        ended = await api.client.post(f"/api/v1/tasks/{mine}/end", headers=headers)
        assert ended.status_code == 403
    sent = [await _command(api, mine, {"action": "wait", "ms": 10}, headers=submitter) for _ in range(16)]
    assert {r.status_code for r in sent} == {202}
    refused = await _command(api, mine, {"action": "observe"}, headers=submitter)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "too_many_commands"
    watched = await api.client.get(f"/api/v1/tasks/{mine}/commands/{sent[0].json()['command_id']}?wait_s=0",
                                   headers=reader)
    assert watched.status_code == 202

    assert (await api.client.post(f"/api/v1/tasks/{mine}/end", headers=submitter)).status_code == 200
    refused = await _command(api, mine, {"action": "observe"}, headers=submitter)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_ended"
    assert (await api.result("host-a", assignment, metadata={"end_reason": "ended"})).status_code == 200
    assert (await api.admin("POST", f"/api/v1/tasks/{mine}/end")).status_code == 200  # idempotent


async def test_end_tells_the_host_and_the_session_ends_succeeded(api: Api, twin: Api) -> None:
    assignment = await _session(api)
    task_id = assignment["task_id"]
    poll = asyncio.ensure_future(_poll(twin, assignment, wait_s=10))
    ended = await api.admin("POST", f"/api/v1/tasks/{task_id}/end")
    assert ended.status_code == 200 and ended.json()["session"]["end_requested"] is True
    polled = (await asyncio.wait_for(poll, WOKEN_WITHIN_S)).json()
    assert polled["end_requested"] is True and polled["commands"] == [] and polled["end_reason"] == "ended"
    assert (await api.admin("POST", f"/api/v1/tasks/{task_id}/end")).json()["session"]["end_reason"] == "ended"
    await api.result("host-a", assignment, metadata={"end_reason": "ended"})
    task = await api.task(task_id)
    assert task["status"] == "succeeded" and task["result"] is not None
    assert "end_requested" in [e["type"] for e in await api.events(task_id)]


async def test_a_long_sessions_history_is_its_last_200_events_in_order(api: Api) -> None:
    # Its command events are kept beside its record (the record stays small however long it
    # runs), and the history merges them: the last wire.TASK_EVENTS_KEPT, oldest first.
    assignment = await _session(api)
    task_id = assignment["task_id"]
    sent = []
    for _ in range(wire.TASK_EVENTS_KEPT // 2 + 1):
        sent.append((await _command(api, task_id, {"action": "observe"})).json()["command_id"])
        assert (await _poll(api, assignment, [_done(sent[-1])])).status_code == 200
    events = await api.events(task_id)
    assert len(events) == wire.TASK_EVENTS_KEPT
    expected = [(kind, c) for c in sent for kind in ("command", "command_answered")][-wire.TASK_EVENTS_KEPT:]
    assert [(e["type"], e["command_id"]) for e in events] == expected
    assert all(e["task_id"] == task_id and e["actor"] == "admin" for e in events)


async def test_an_idle_session_is_asked_to_end_and_purged_with_its_relay(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, task_retention_s=1) as api:
        assignment = await _session(api, idle_timeout_s=10, max_duration_s=60)
        task_id = assignment["task_id"]
        command_id = (await _command(api, task_id, {"action": "observe"})).json()["command_id"]
        await _poll(api, assignment, [_done(command_id)])
        clock.advance(9_000)
        await api.sweep()
        assert (await api.task(task_id))["session"]["end_requested"] is False
        clock.advance(2_000)
        await api.sweep()
        session = (await api.task(task_id))["session"]
        assert session["end_requested"] is True and session["end_reason"] == "idle_timeout"
        polled = (await _poll(api, assignment)).json()
        assert polled["end_requested"] is True and polled["end_reason"] == "idle_timeout"
        await api.result("host-a", assignment, metadata={"end_reason": "idle_timeout"})

        keys, redis = api.ctx.store.keys, api.ctx.store.redis
        relay = [keys.commands(task_id), keys.command_log(task_id), keys.command_queue(task_id),
                 keys.command_events(task_id)]
        assert await redis.exists(keys.command_events(task_id)) == 1
        clock.advance(2_000)
        await api.sweep()
        assert await redis.exists(*relay) == 0
        assert await redis.zscore(keys.session_deadlines, task_id) is None
        assert (await api.admin("GET", f"/api/v1/tasks/{task_id}")).status_code == 404


async def test_a_session_over_its_artifact_cap_drops_its_oldest_screens(api_factory: Any, tmp_path: Any) -> None:
    screen = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # 1,032 bytes
    root = tmp_path / "artifacts"
    async with api_factory(artifacts_dir=root, max_task_artifact_bytes=3_000, max_task_artifacts=5) as api:
        assignment = await _session(api)
        task_id = assignment["task_id"]
        for index in range(4):
            stored = await api.client.put(
                f"/internal/v1/hosts/host-a/leases/{assignment['lease_id']}/artifacts/screen-{index}.png",
                params={"task_id": task_id, "attempt": 1},
                content=screen + bytes([index]), headers={**api.host_headers("host-a"), "content-type": "image/png"})
            assert stored.status_code == 201, stored.text
        listed = (await api.admin("GET", f"/api/v1/tasks/{task_id}/artifacts")).json()["artifacts"]
        assert sorted(a["name"] for a in listed) == ["screen-2.png", "screen-3.png"]
        assert len([p for p in root.rglob("*") if p.is_file()]) == 2  # the dropped screens' bytes went too
        refused = await api.client.put(
            f"/internal/v1/hosts/host-a/leases/{assignment['lease_id']}/artifacts/huge.png",
            params={"task_id": task_id, "attempt": 1}, content=screen * 3,
            headers={**api.host_headers("host-a"), "content-type": "image/png"})
        assert refused.status_code in (409, 413)
        assert len((await api.admin("GET", f"/api/v1/tasks/{task_id}/artifacts")).json()["artifacts"]) == 2


async def test_a_cancel_wakes_the_hosts_poll_and_ends_the_session_cancelled(api: Api, twin: Api) -> None:
    assignment = await _session(api)
    task_id = assignment["task_id"]
    poll = asyncio.ensure_future(_poll(twin, assignment, wait_s=10))
    assert (await api.admin("POST", f"/api/v1/tasks/{task_id}/cancel")).status_code == 200
    assert (await asyncio.wait_for(poll, WOKEN_WITHIN_S)).json()["cancel_requested"] is True
    refused = await _command(api, task_id, {"action": "observe"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_ended"
    await api.result("host-a", assignment, status="cancelled")
    assert (await api.task(task_id))["status"] == "cancelled"


async def test_a_session_past_its_max_duration_is_asked_to_end_however_busy(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock) as api:
        assignment = await _session(api, idle_timeout_s=3600, max_duration_s=60)
        for _ in range(3):  # busy all along, its lease renewed by its host's polls
            clock.advance(25_000)
            await _command(api, assignment["task_id"], {"action": "observe"})
            polled = (await _poll(api, assignment)).json()
            await _poll(api, assignment, [_done(c["command_id"]) for c in polled["commands"]])
            await api.sweep()
        session = (await api.task(assignment["task_id"]))["session"]
        assert session["end_requested"] is True and session["end_reason"] == "max_duration"
        assert (await _poll(api, assignment)).json()["end_requested"] is True


STEPS = ("send", "poll", "answer", "answer_again", "answer_foreign")
EXAMPLES = settings(max_examples=15, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


async def test_commands_reach_the_host_in_order_one_at_a_time_and_the_first_answer_stands(api: Api) -> None:
    """Whatever the order of sends, polls and answers (repeated, late, foreign): a poll hands out
    the oldest command not answered yet and no other; a command's answer is the first one given;
    at most 16 commands wait."""
    await api.heartbeat("host-a", ["a1"], agent=SESSIONS)

    async def example(steps: list[str]) -> None:
        assert (await api.create_task(kind="session", device_id="a1")).status_code == 201
        assignment = await claim_one(api, "host-a")
        task_id = assignment["task_id"]
        sent: list[str] = []
        first: dict[str, str] = {}  # command id -> the error text of its first answer
        for number, step in enumerate(steps):
            pending = [c for c in sent if c not in first]
            if step == "send":
                answer = await _command(api, task_id, {"action": "wait", "ms": number})
                if len(pending) >= 16:
                    assert answer.json()["error"]["code"] == "too_many_commands"
                else:
                    sent.append(answer.json()["command_id"])
                continue
            answers = []
            if step == "answer" and pending:
                answers = [_done(pending[0], error=f"answer {number}")]
                first[pending[0]] = f"answer {number}"
            elif step == "answer_again" and first:
                answers = [_done(next(iter(first)), error=f"late {number}")]
            elif step == "answer_foreign":
                answers = [_done(f"c_foreign{number}")]
            polled = (await _poll(api, assignment, answers)).json()
            waiting = [c for c in sent if c not in first]
            assert [c["command_id"] for c in polled["commands"]] == waiting[:1]
        recording = (await api.admin("GET", f"/api/v1/tasks/{task_id}/commands?limit=1000")).json()["commands"]
        assert [c["command_id"] for c in recording] == sent
        assert {c["command_id"]: c.get("error") for c in recording if c["status"] != "pending"} == first
        await api.admin("POST", f"/api/v1/tasks/{task_id}/end")
        await api.result("host-a", assignment, metadata={"end_reason": "ended"})

    @EXAMPLES
    @given(steps=st.lists(st.sampled_from(STEPS), max_size=30))
    def examples(steps: list[str]) -> None:
        anyio.from_thread.run(example, steps)

    await anyio.to_thread.run_sync(examples)


async def test_an_answer_past_its_bound_keeps_the_elements_that_fit(api: Api) -> None:
    assignment = await _session(api)
    task_id = assignment["task_id"]
    command_id = (await _command(api, task_id, {"action": "observe"})).json()["command_id"]
    answer = _done(command_id)
    answer["observation"]["elements"] = [{"text": "x" * 1000, "index": i} for i in range(500)]
    assert (await _poll(api, assignment, [answer])).status_code == 200
    body = (await api.admin("GET", f"/api/v1/tasks/{task_id}/commands/{command_id}")).json()
    kept = body["observation"]["elements"]
    assert body["observation"]["elements_truncated"] is True
    assert 0 < len(kept) < 500 and [e["index"] for e in kept] == list(range(len(kept)))
    stored = await api.ctx.store.redis.hget(api.ctx.store.keys.commands(task_id), command_id)
    assert len(stored) <= 2 * wire.SESSION_ANSWER_MAX_BYTES  # the answer, and its command around it
