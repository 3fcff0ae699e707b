"""COORDINATOR_REDIS_WAIT_REPLICAS: a state change is acknowledged only once Redis's WAIT says
that many replicas have it. The single node here has no replica; each master of the local
cluster has one. (The seam's own WAIT contract: test_redis_transport.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from tests.coordinator.helpers import claim_one

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


def _replicas(redis_client: aioredis.Redis) -> int:
    """How many replicas each master of this backend has (fakeredis cannot WAIT: skipped)."""
    if "Fake" in type(redis_client).__name__:
        pytest.skip("fakeredis has no replicas to WAIT for")
    return 1 if isinstance(redis_client, RedisCluster) else 0


async def test_with_enough_replicas_every_change_is_acknowledged(api_factory: Callable[..., Any],
                                                                 redis_client: aioredis.Redis) -> None:
    replicas = _replicas(redis_client)
    if replicas == 0:
        pytest.skip("the single node has no replica")
    async with api_factory(redis_wait_replicas=replicas) as api:
        assert (await api.heartbeat("host-a", ["a1"])).status_code == 200
        created = await api.create_task(device_id="a1")
        assert created.status_code == 201
        assignment = await claim_one(api, "host-a")
        assert (await api.renew("host-a", assignment)).status_code == 200
        assert (await api.result("host-a", assignment)).status_code == 200
        assert (await api.task(created.json()["task_id"]))["status"] == "succeeded"


async def test_too_few_replicas_answer_503_and_the_retry_is_safe(api_factory: Callable[..., Any],
                                                                redis_client: aioredis.Redis) -> None:
    wanted = _replicas(redis_client) + 1
    async with api_factory(redis_wait_replicas=wanted, redis_wait_timeout_ms=50) as api:
        body = {"kind": "goal", "goal": "g", "selector": {"driver": "sim"}, "idempotency_key": "k-1"}
        refused = await api.client.post("/api/v1/tasks", json=body, headers=api.admin_headers)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"
        assert refused.headers["retry-after"] == "1"
        assert "replica" in refused.json()["error"]["message"]
        # The master did run it (WAIT cannot undo a write): retrying with the idempotency key is
        # what makes the retry safe. With the replicas back, the retry is acknowledged, once.
        api.ctx.store.durability = type(api.ctx.store.durability)(replicas=0)
        again = await api.client.post("/api/v1/tasks", json=body, headers=api.admin_headers)
        assert again.status_code == 200 and again.json()["status"] == "queued"
        listed = await api.admin("GET", "/api/v1/tasks")
        assert [t["task_id"] for t in listed.json()["tasks"]] == [again.json()["task_id"]]
