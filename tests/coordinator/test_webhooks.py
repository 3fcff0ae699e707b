"""Webhooks (PROTOCOL.md, "Webhooks"): an admin registers an endpoint, the scripts that end a task,
take a host offline or disable a device append its deliveries to the outbox in the same step, and
the coordinator's delivery loop posts each, signed, to a real HTTP receiver in this process,
retrying with the same delivery id until a 2xx. On real Redis and fakeredis."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import silence_host
from tests.support import wait_until_async
from tests.webhook_receiver import ALLOW_RECEIVERS, HANG, receiving
from tether import verify_signature

pytestmark = pytest.mark.anyio

# Short enough for a test: polls, backoff and timeouts in tens of milliseconds.
FAST: dict[str, Any] = {**ALLOW_RECEIVERS, "webhook_poll_interval_s": 0.02, "webhook_retry_base_s": 0.05,
                        "webhook_retry_max_delay_s": 0.1, "webhook_attempt_timeout_s": 2.0,
                        "webhook_visibility_s": 10.0}


async def register(api: Api, url: str, events: tuple[str, ...] = ("task.ended",), **extra: Any) -> dict[str, Any]:
    response = await api.admin("POST", "/api/v1/webhooks", json={"url": url, "events": list(events), **extra})
    assert response.status_code == 201, response.text
    return response.json()


async def end_task(api: Api, **body: Any) -> str:
    """A task that ends now (queued for a device nobody has, then cancelled): its id."""
    created = await api.create_task(device_id="nowhere", **body)
    assert created.status_code == 201, created.text
    task_id: str = created.json()["task_id"]
    cancelled = await api.admin("POST", f"/api/v1/tasks/{task_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    return task_id


async def deliveries(api: Api, webhook_id: str, **params: Any) -> list[dict[str, Any]]:
    response = await api.admin("GET", f"/api/v1/webhooks/{webhook_id}/deliveries", params=params)
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["deliveries"]
    return listed


async def delivery_where(api: Api, webhook_id: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The webhook's newest delivery, once ``check`` holds of it."""
    async def newest() -> dict[str, Any] | None:
        listed = await deliveries(api, webhook_id)
        return listed[0] if listed and check(listed[0]) else None
    found: dict[str, Any] = await wait_until_async(newest, 20, what="the delivery's state")
    return found


# -- registration ------------------------------------------------------------------------------


async def test_an_admin_registers_a_webhook_and_sees_its_secret_only_in_the_answer(api: Api) -> None:
    created = await register(api, "https://ci.example/hook", ("task.ended", "host.offline"), team="checkout")
    assert created["secret"].startswith("whsec_") and len(created["secret"]) > 40
    assert created["events"] == ["task.ended", "host.offline"] and created["team"] == "checkout"
    listing = await api.admin("GET", "/api/v1/webhooks")
    assert listing.status_code == 200
    [listed] = listing.json()["webhooks"]
    assert listed == {k: v for k, v in created.items() if k != "secret"}
    assert created["secret"] not in listing.text
    removed = await api.admin("DELETE", f"/api/v1/webhooks/{created['id']}")
    assert removed.status_code == 200 and removed.json()["id"] == created["id"]
    assert (await api.admin("GET", "/api/v1/webhooks")).json() == {"webhooks": []}
    again = await api.admin("DELETE", f"/api/v1/webhooks/{created['id']}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"
    unknown = await api.admin("GET", f"/api/v1/webhooks/{created['id']}/deliveries")
    assert unknown.status_code == 404


@pytest.mark.parametrize("body", [
    {"url": "ftp://ci.example/hook", "events": ["task.ended"]},
    {"url": "https://user:hunter2-secret@ci.example/hook", "events": ["task.ended"]},
    {"url": "https:///hook", "events": ["task.ended"]},
    {"url": "ci.example/hook", "events": ["task.ended"]},
    {"url": "https://ci.example/hook", "events": []},
    {"url": "https://ci.example/hook", "events": ["task.started"]},
    {"url": "https://ci.example/hook", "events": ["task.ended", "task.ended"]},
    {"url": "https://ci.example/hook", "events": "task.ended"},
    {"url": "https://ci.example/hook", "events": ["task.ended"], "team": "no such/team"},
    {"url": "https://ci.example/hook", "events": ["task.ended"], "secret": "mine"},
    {"url": "https://ci.example/hook"},
    {"events": ["task.ended"]},
], ids=lambda body: ",".join(f"{k}={v}" for k, v in body.items()))
async def test_a_bad_registration_is_400_invalid_request_and_registers_nothing(api: Api, body: dict[str, Any]) -> None:
    response = await api.admin("POST", "/api/v1/webhooks", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert "hunter2-secret" not in response.text
    assert (await api.admin("GET", "/api/v1/webhooks")).json() == {"webhooks": []}


async def test_a_token_without_the_admin_scope_gets_403_insufficient_scope(api: Api) -> None:
    minted = await api.admin("POST", "/api/v1/operator-tokens",
                             json={"name": "ci", "scopes": ["read", "submit", "control"]})
    headers = {"authorization": f"Bearer {minted.json()['token']}"}
    calls = [("POST", "/api/v1/webhooks", {"url": "https://ci.example/hook", "events": ["task.ended"]}),
             ("GET", "/api/v1/webhooks", None), ("DELETE", "/api/v1/webhooks/wh_1", None),
             ("GET", "/api/v1/webhooks/wh_1/deliveries", None)]
    for method, path, body in calls:
        response = await api.client.request(method, path, headers=headers, json=body)
        assert response.status_code == 403, (method, path, response.text)
        assert response.json()["error"]["code"] == "insufficient_scope"
    assert (await api.admin("GET", "/api/v1/webhooks")).json() == {"webhooks": []}


# -- the outbox ------------------------------------------------------------------------------


async def test_with_no_webhook_for_an_event_nothing_is_appended(api_factory: Any) -> None:
    async with api_factory(**FAST) as api:
        keys = api.ctx.store.keys
        await end_task(api)
        assert await api.ctx.store.redis.exists(keys.webhook_outbox) == 0
        await register(api, "http://127.0.0.1:9/hook", ("host.offline",))
        await end_task(api)
        assert await api.ctx.store.redis.xlen(keys.webhook_outbox) == 0
        assert await api.ctx.store.redis.hlen(keys.webhook_deliveries) == 0


@pytest.mark.cluster
async def test_an_ended_task_is_delivered_signed_with_the_task_as_get_answers_it(api_factory: Any) -> None:
    with receiving() as receiver:
        async with api_factory(**FAST) as api:
            webhook = await register(api, receiver.url)
            task_id = await end_task(api)
            [request] = await receiver.arrived(1)
            assert verify_signature(webhook["secret"], request.headers["tether-signature"], request.body)
            assert not verify_signature("whsec_other", request.headers["tether-signature"], request.body)
            body = request.json()
            assert set(body) == {"id", "type", "created_at", "data"}
            assert body["id"] == request.delivery and body["type"] == "task.ended"
            assert body["data"] == await api.task(task_id)
            assert request.headers["content-type"] == "application/json"
            delivered = await delivery_where(api, webhook["id"], lambda d: d["state"] == "delivered")
            assert delivered["id"] == request.delivery and delivered["attempts"] == 1
            assert delivered["last_status"] == 200 and delivered["next_attempt_at"] is None
            assert delivered["event"] == "task.ended" and delivered["created_at"] == body["created_at"]


async def test_retries_after_a_5xx_and_a_timeout_keep_the_delivery_id(api_factory: Any) -> None:
    with receiving([503, HANG, 200]) as receiver:
        async with api_factory(**{**FAST, "webhook_attempt_timeout_s": 0.3}) as api:
            webhook = await register(api, receiver.url)
            await end_task(api)
            requests = await receiver.arrived(3)
            assert len({r.delivery for r in requests}) == 1
            assert len({r.json()["id"] for r in requests}) == 1
            assert all(verify_signature(webhook["secret"], r.headers["tether-signature"], r.body) for r in requests)
            delivered = await delivery_where(api, webhook["id"], lambda d: d["state"] == "delivered")
            assert delivered["attempts"] == 3 and delivered["id"] == requests[0].delivery


async def test_a_redirect_is_not_followed_and_fails_the_attempt(api_factory: Any) -> None:
    with receiving(default=307) as receiver:
        async with api_factory(**FAST) as api:
            webhook = await register(api, receiver.url)
            await end_task(api)
            pending = await delivery_where(api, webhook["id"], lambda d: d["attempts"] >= 2)
            assert pending["state"] == "pending" and pending["last_status"] == 307
            assert pending["next_attempt_at"] is not None
            assert receiver.requests("/elsewhere") == []


async def test_a_delivery_retried_past_its_time_to_live_fails_and_each_failure_is_one_line_without_secrets(
        api_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.webhooks")
    with receiving(default=500) as receiver:
        async with api_factory(**{**FAST, "webhook_retry_for_s": 0.3}) as api:
            webhook = await register(api, receiver.url)
            await end_task(api)
            failed = await delivery_where(api, webhook["id"], lambda d: d["state"] == "failed")
            assert failed["attempts"] >= 2 and failed["last_status"] == 500 and failed["next_attempt_at"] is None
            metrics = (await api.client.get("/metrics")).text
    lines = [r.getMessage() for r in caplog.records if r.name == "coordinator.webhooks"]
    assert len(lines) == failed["attempts"]
    assert all(failed["id"] in line and "\n" not in line for line in lines)
    assert "delivery failed" in lines[-1]
    body = receiver.requests()[0].body.decode()
    for leak in (webhook["secret"], receiver.url, body):
        assert all(leak not in line for line in lines)
        assert leak not in metrics


async def test_a_team_filter_limits_task_events_to_that_teams(api_factory: Any) -> None:
    with receiving() as receiver:
        async with api_factory(**FAST) as api:
            webhook = await register(api, receiver.url, team="checkout")
            await end_task(api)  # team default: not this webhook's
            checkout = await end_task(api, team="checkout")
            [request] = await receiver.arrived(1)
            assert request.json()["data"]["task_id"] == checkout
            # Appended in order and read in order: the first would have been taken before.
            await delivery_where(api, webhook["id"], lambda d: d["state"] == "delivered")
            assert len(await deliveries(api, webhook["id"])) == 1


async def test_a_host_going_offline_and_a_disabled_device_are_delivered(api_factory: Any) -> None:
    with receiving() as receiver:
        async with api_factory(**FAST) as api:
            await register(api, receiver.url, ("host.offline", "device.disabled"), team="checkout")
            assert (await api.heartbeat("host-a", ["a1"])).status_code == 200
            disabled = await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "cracked screen"})
            assert disabled.status_code == 200
            await silence_host(api, "host-a")
            assert (await api.sweep())["hosts"] == 1
            requests = await receiver.arrived(2)
            by_type = {r.json()["type"]: r.json()["data"] for r in requests}
            assert by_type["device.disabled"]["device_id"] == "a1" and by_type["device.disabled"]["disabled"]
            assert by_type["host.offline"]["host_id"] == "host-a" and not by_type["host.offline"]["online"]


async def test_an_ended_run_is_delivered_once_with_the_run_as_get_answers_it(api_factory: Any) -> None:
    with receiving() as receiver:
        async with api_factory(**FAST) as api:
            await register(api, receiver.url, ("run.ended",))
            created = await api.admin("POST", "/api/v1/runs", json={
                "name": "nightly", "tasks": [{"kind": "goal", "goal": "g", "device_id": "nowhere"}] * 2})
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            cancelled = await api.admin("POST", f"/api/v1/runs/{run_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            [request] = await receiver.arrived(1)  # one for the run, none for its two tasks
            body = request.json()
            assert body["type"] == "run.ended"
            run = await api.admin("GET", f"/api/v1/runs/{run_id}")
            assert body["data"] == run.json() and body["data"]["status"] == "cancelled"


async def test_a_removed_webhook_gets_no_more_attempts(api_factory: Any) -> None:
    with receiving(default=500) as receiver:
        async with api_factory(**FAST) as api:
            webhook = await register(api, receiver.url)
            await end_task(api)
            await receiver.arrived(1)
            assert (await api.admin("DELETE", f"/api/v1/webhooks/{webhook['id']}")).status_code == 200
            redis, keys = api.ctx.store.redis, api.ctx.store.keys
            await wait_until_async(lambda: _empty(redis, keys), what="the retries of the removed webhook dropped")
            assert await redis.hlen(keys.webhook_deliveries) == 0
            assert await redis.hlen(keys.webhook_routes) == 0


async def _empty(redis: Any, keys: Any) -> bool:
    return await redis.zcard(keys.webhook_retries) == 0 and await redis.xlen(keys.webhook_outbox) == 0


async def test_a_webhook_lists_its_last_100_deliveries_and_keeps_no_more(api_factory: Any) -> None:
    with receiving() as receiver:
        async with api_factory(**FAST) as api:
            webhook = await register(api, receiver.url)
            for _ in range(105):
                await end_task(api)
            await receiver.arrived(105)
            await wait_until_async(lambda: _all_delivered(api, webhook["id"]), what="every delivery recorded")
            listed = await deliveries(api, webhook["id"])
            assert len(listed) == 100
            assert [d["id"] for d in listed] == sorted((d["id"] for d in listed), key=_entry_order, reverse=True)
            assert {d["id"] for d in listed} == set(sorted(receiver.ids(), key=_entry_order)[-100:])
            assert len(await deliveries(api, webhook["id"], limit=7)) == 7
            assert await api.ctx.store.redis.hlen(api.ctx.store.keys.webhook_deliveries) == 100
            too_many = await api.admin("GET", f"/api/v1/webhooks/{webhook['id']}/deliveries", params={"limit": 101})
            assert too_many.status_code == 400


def _entry_order(delivery_id: str) -> tuple[int, int]:
    ms, seq = delivery_id.removeprefix("d_").split("-")
    return int(ms), int(seq)


async def _all_delivered(api: Api, webhook_id: str) -> bool:
    listed = await deliveries(api, webhook_id)
    return len(listed) == 100 and all(d["state"] == "delivered" for d in listed)


async def test_metrics_show_the_outbox_and_the_delivery_latency(api_factory: Any) -> None:
    with receiving([HANG]) as receiver:
        async with api_factory(**FAST) as api:
            webhook = await register(api, receiver.url, ("task.ended",))
            await end_task(api)
            await receiver.arrived(1)
            # Held by the receiver: still in the outbox until its attempt is recorded.
            held = (await api.client.get("/metrics")).text
            assert "tether_webhook_outbox 1.0" in held and "tether_webhook_delivery_seconds_count 0.0" in held
            receiver.release()
            await delivery_where(api, webhook["id"], lambda d: d["state"] == "delivered")
            after = (await api.client.get("/metrics")).text
            assert "tether_webhook_outbox 0.0" in after and "tether_webhook_delivery_seconds_count 1.0" in after
            assert 'tether_webhook_attempts_total{outcome="delivered"} 1.0' in after
            assert webhook["secret"] not in after


async def test_a_hanging_endpoint_holds_only_its_own_slots_and_never_delays_another(api_factory: Any) -> None:
    settings = {**FAST, "webhook_endpoint_concurrency": 2, "webhook_attempt_timeout_s": 30.0,
                "webhook_visibility_s": 60.0}
    with receiving(default=HANG) as hanging, receiving() as healthy:
        async with api_factory(**settings) as api:
            stuck = await register(api, hanging.url)
            fine = await register(api, healthy.url)
            ended = [await end_task(api) for _ in range(5)]
            # The healthy endpoint hears of every task while the hanging one holds two attempts.
            delivered = await healthy.arrived(5)
            assert sorted(r.json()["data"]["task_id"] for r in delivered) == sorted(ended)
            await delivery_where(api, fine["id"], lambda d: d["state"] == "delivered")
            await hanging.arrived(2)

            async def three_deferred() -> bool:
                listed = await deliveries(api, stuck["id"])
                waiting = [d for d in listed if d["attempts"] == 0 and d["next_attempt_at"] is not None]
                return len(listed) == 5 and len(waiting) == 3

            # The other three wait their turn (deferred, no attempt counted), never sent meanwhile.
            await wait_until_async(three_deferred, what="three deliveries deferred")
            assert len(hanging.requests()) == 2
