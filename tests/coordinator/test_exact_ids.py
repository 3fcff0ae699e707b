"""Ids and keys are judged exactly as sent (issue 26, seen 5): a control character in one is
`400 invalid_request` and changes nothing, never stripped into another, valid id. Only free text
(a goal, a reason, progress, attributes, metadata) is stored without C0 controls."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import (
    claim_one,
    enrolled_host,
    redis_state,
    running_task,
)

pytestmark = pytest.mark.anyio


def _refused(response: Any) -> None:
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"


async def _tasks(api: Api) -> list[dict[str, Any]]:
    response = await api.admin("GET", "/api/v1/tasks")
    assert response.status_code == 200, response.text
    return response.json()["tasks"]


async def _device_ids(api: Api) -> list[str]:
    response = await api.admin("GET", "/api/v1/devices")
    assert response.status_code == 200, response.text
    return [d["device_id"] for d in response.json()["devices"]]


async def test_a_task_for_a_device_id_with_a_control_character_is_refused(api: Api) -> None:
    await api.heartbeat("host-a", ["zztop"])
    before = await redis_state(api)
    _refused(await api.create_task(device_id="zz\u0001top"))
    assert await redis_state(api) == before
    assert await _tasks(api) == []


async def test_a_heartbeat_device_id_with_a_control_character_is_refused(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    for device_id in ("zz\u0001top", "p\u0000q"):
        _refused(await api.heartbeat("host-a", [device_id]))
    assert await redis_state(api) == before
    assert await _device_ids(api) == ["a1"]
    for stripped in ("zztop", "pq"):
        assert (await api.admin("GET", f"/api/v1/devices/{stripped}")).status_code == 404


async def test_idempotency_keys_that_differ_by_a_control_character_never_collide(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    _refused(await api.create_task(device_id="a1", idempotency_key="a\u0000b"))
    _refused(await api.create_task(device_id="a1", idempotency_key="a\u0001b"))
    assert await redis_state(api) == before
    assert await _tasks(api) == []
    # The key they would have been stripped to is still free: its first create makes a new task.
    created = await api.create_task(device_id="a1", idempotency_key="ab")
    assert created.status_code == 201, created.text
    assert created.json()["idempotency_key"] == "ab"


@pytest.mark.parametrize("field", ["driver", "claim_id", "task_id", "lease_id", "enrollment_id"])
async def test_every_id_field_of_a_body_is_judged_as_sent(api: Api, field: str) -> None:
    running = await running_task(api)
    before = await redis_state(api)
    if field == "driver":
        _refused(await api.heartbeat("host-a", [{"device_id": "a1", "driver": "s\u0002im", "status": "available"}]))
        _refused(await api.create_task(selector={"driver": "s\u0002im"}))
    elif field == "claim_id":  # c-1 is the claim id the running task was claimed with
        _refused(await api.claim("host-a", claim_id="c\u0003-1"))
    elif field == "task_id":
        _refused(await api.renew("host-a", {**running, "task_id": running["task_id"] + "\u0004"}))
        _refused(await api.result("host-a", {**running, "task_id": "\u0004" + running["task_id"]}))
    elif field == "lease_id":
        _refused(await api.result("host-a", {**running, "lease_id": running["lease_id"] + "\u0005"}))
    else:
        token = (await api.admin("POST", "/api/v1/enrollment-tokens", json={})).json()["token"]
        before = await redis_state(api)
        response = await api.client.post(
            "/internal/v1/enroll", headers={"authorization": f"Bearer {token}"},
            json={"enrollment_id": "e\u0006-1", "host_token": "h" * 40},
        )
        _refused(response)
    assert await redis_state(api) == before


async def test_status_words_are_judged_as_sent(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    _refused(await api.heartbeat("host-a", [{"device_id": "a1", "driver": "sim", "status": "busy\u0007"}]))
    _refused(await api.create_task(kind="go\u0000al", goal="x", device_id="a1"))
    assert await redis_state(api) == before


async def test_label_names_and_values_are_keys_judged_as_sent(api: Api) -> None:
    """Selectors match labels by equality, so a label is a key: stripping would make `lab\\x001`
    and `lab\\x011` the same label. Tab and newline were never stripped and stay allowed."""
    await api.heartbeat("host-a", ["a1"])
    before = await redis_state(api)
    for labels in ({"room": "lab\u0000 1"}, {"ro\u0001om": "lab 1"}):
        device = {"device_id": "a1", "driver": "sim", "status": "available", "labels": labels}
        _refused(await api.heartbeat("host-a", [device]))
        _refused(await api.create_task(selector={"driver": "sim", "labels": labels}))
        _refused(await api.admin("POST", "/api/v1/enrollment-tokens", json={"labels": labels}))
    assert await redis_state(api) == before
    device = {"device_id": "a1", "driver": "sim", "status": "available", "labels": {"room": "lab 1\tB"}}
    assert (await api.heartbeat("host-a", [device])).status_code == 200
    task = await api.create_task(selector={"driver": "sim", "labels": {"room": "lab 1\tB"}})
    assert task.status_code == 201, task.text
    assert (await claim_one(api, "host-a"))["task_id"] == task.json()["task_id"]


async def test_a_host_token_is_a_secret_kept_as_sent(api: Api) -> None:
    """Stripping would let two host tokens share one digest, and store a digest of a token the
    agent never holds; a control character cannot travel in an Authorization header anyway."""
    token = (await api.admin("POST", "/api/v1/enrollment-tokens", json={})).json()["token"]
    before = await redis_state(api)
    response = await api.client.post(
        "/internal/v1/enroll", headers={"authorization": f"Bearer {token}"},
        json={"enrollment_id": "e-1", "host_token": "h" * 39 + "\u0001" + "h"},
    )
    _refused(response)
    assert await redis_state(api) == before
    host_id, headers = await enrolled_host(api)
    assert (await api.client.put(f"/internal/v1/hosts/{host_id}/heartbeat", json={"devices": []},
                                 headers=headers)).status_code == 200


async def test_free_text_is_still_stored_without_control_characters(api: Api) -> None:
    running = await running_task(api)
    result = await api.result("host-a", running, status="failed", failure_reason="gone\u0001 away",
                              metadata={"no\u0002te": "x\u0003y"})
    assert result.status_code == 200, result.text
    task = await api.task(running["task_id"])
    assert task["result"]["failure_reason"] == "gone away"
    assert task["result"]["metadata"] == {"note": "xy"}
    workflow = await api.create_task(kind="workflow", workflow={"name": "w", "params": {"t\u0000": "a\u0001b"}},
                                     device_id="a1")
    assert workflow.status_code == 201, workflow.text
    assert workflow.json()["workflow"] == {"name": "w", "params": {"t": "ab"}}
