"""A claim retried with its claim id after a lost answer: the same lease, live for a full TTL
from the replay, or 204 once that lease has ended."""

from __future__ import annotations

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import (
    claim_one,
    expire_lease,
    redis_state,
    running_task,
)

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

HOST = "/internal/v1/hosts/host-a"


async def test_claim_replay_extends_a_live_lease_to_a_full_ttl(api: Api) -> None:
    first = await running_task(api)
    store = api.ctx.store
    # Time passes: the lease has 100 ms left when the replay arrives.
    now = await api.ctx.queries.redis_time_ms()
    await store.redis.zadd(store.keys.lease_deadlines, {first["task_id"]: now + 100})
    replay = await claim_one(api, "host-a", claim_id="c-1")
    assert replay["lease_id"] == first["lease_id"] and replay["task_id"] == first["task_id"]
    deadline = await store.redis.zscore(store.keys.lease_deadlines, first["task_id"])
    assert deadline >= now + api.ctx.settings.lease_ttl_ms
    assert replay["lease_expires_at"] >= first["lease_expires_at"]
    assert replay["lease_ttl_ms"] == api.ctx.settings.lease_ttl_ms
    assert (await api.renew("host-a", replay)).status_code == 200


@pytest.mark.parametrize("ending", ["expired", "result"])
async def test_claim_replay_of_an_ended_lease_gets_204_and_claims_nothing(api: Api, ending: str) -> None:
    first = await running_task(api)
    if ending == "expired":
        await expire_lease(api, first)
        await api.sweep()
    else:
        assert (await api.result("host-a", first)).status_code == 200
    await api.create_task(device_id="a1")  # new work is queued for the host meanwhile
    before = await redis_state(api)
    response = await api.claim("host-a", claim_id="c-1")
    assert response.status_code == 204
    assert await redis_state(api) == before
