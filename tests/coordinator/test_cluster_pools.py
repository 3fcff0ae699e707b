"""Several deployments (pools) on one Redis Cluster: each prefix carries its own hash tag, so each
pool's keys live in one slot, the pools' slots spread over the masters, and one pool's load never
touches another's keys."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis

from coordinator.app import create_app
from coordinator.transport.cluster import ClusterTransport
from coordinator.transport.open import open_cluster
from tests.cluster import LocalCluster
from tests.conftest import Api, make_settings
from tests.coordinator.helpers import claim_one
from tests.support import glob_escape, wait_until_async

pytestmark = pytest.mark.anyio


def _prefixes_on_distinct_masters(cluster: LocalCluster, count: int) -> list[str]:
    """``count`` prefixes with hash tags of their own whose slots are held by different masters."""
    chosen: dict[int, str] = {}
    while len(chosen) < count:
        prefix = f"tether-pool-{uuid.uuid4().hex[:8]}:{{pool-{uuid.uuid4().hex[:6]}}}"
        chosen.setdefault(cluster.master_of(f"{prefix}:tasks"), prefix)
    return list(chosen.values())


@contextlib.asynccontextmanager
async def _pool(cluster: LocalCluster, prefix: str) -> AsyncIterator[Api]:
    """One deployment's coordinator on the cluster, with its own cluster client."""
    app = create_app(make_settings(prefix), redis=ClusterTransport(open_cluster(cluster.url, max_connections=8)))
    transport = httpx.ASGITransport(app=app)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://pool") as client):
        yield Api(client, app)


def _keys_and_values(node: redis.Redis, prefix: str) -> dict[bytes, Any]:
    """Every key of ``prefix`` on one node, with a dump of its value."""
    return {key: node.dump(key) for key in node.scan_iter(match=glob_escape(prefix) + ":*", count=1000)}


async def test_pools_spread_over_the_masters_and_one_pool_s_load_leaves_the_others_alone(
        local_cluster: LocalCluster) -> None:
    busy_prefix, quiet_prefix = _prefixes_on_distinct_masters(local_cluster, 2)
    busy_port = local_cluster.master_of(f"{busy_prefix}:tasks")
    quiet_port = local_cluster.master_of(f"{quiet_prefix}:tasks")
    assert busy_port != quiet_port
    busy_node = redis.Redis(port=busy_port)
    quiet_node = redis.Redis(port=quiet_port)
    try:
        async with _pool(local_cluster, busy_prefix) as busy, _pool(local_cluster, quiet_prefix) as quiet:
            # the quiet pool has state of its own: a host, a device, a queued task
            await quiet.heartbeat("host-a", ["q1"])
            waiting = (await quiet.create_task(selector={"driver": "other"})).json()
            before = _keys_and_values(quiet_node, quiet_prefix)
            assert before

            # the busy pool runs lifecycles with the same host and device names
            await busy.heartbeat("host-a", ["a1"])
            for _ in range(20):
                await busy.create_task(device_id="a1")
                assignment = await claim_one(busy, "host-a")
                assert (await busy.renew("host-a", assignment)).status_code == 200
                assert (await busy.result("host-a", assignment)).status_code == 200

            # every key of the busy pool sits on its own master, none on the quiet pool's node
            busy_keys = _keys_and_values(busy_node, busy_prefix)
            assert {f"{busy_prefix}:{name}" for name in ("tasks", "tasks_by_status", "feed", "device_runs:a1")} \
                <= {key.decode() for key in busy_keys}
            assert not _keys_and_values(quiet_node, busy_prefix)
            slots = {local_cluster.slot_of(key.decode()) for key in list(busy_keys)[:50]}
            assert slots == {local_cluster.slot_of(f"{busy_prefix}:tasks")}
            # and the quiet pool's keys are exactly as they were
            assert _keys_and_values(quiet_node, quiet_prefix) == before
            assert (await quiet.task(waiting["task_id"]))["status"] == "queued"
            assert (await quiet.admin("GET", "/api/v1/tasks")).json()["tasks"][0]["task_id"] == waiting["task_id"]
    finally:
        for node, prefix in ((busy_node, busy_prefix), (quiet_node, quiet_prefix)):
            for key in list(_keys_and_values(node, prefix)):
                node.delete(key)
            node.close()



async def test_waiting_polls_hold_a_fixed_number_of_connections_to_the_master(
        local_cluster: LocalCluster) -> None:
    prefix = _prefixes_on_distinct_masters(local_cluster, 1)[0]
    node = redis.Redis(port=local_cluster.master_of(f"{prefix}:tasks"))
    # As the master counts them: connections that are no client's of this test's pool.
    before = len(node.client_list(_type="normal"))
    try:
        async with _pool(local_cluster, prefix) as api:
            client = api.ctx.store.redis
            await api.heartbeat("host-a", ["a1"])
            polls = [asyncio.ensure_future(api.claim("host-a", wait_s=3)) for _ in range(100)]
            await wait_until_async(lambda: api.ctx.waiter.waiting == 100, what="100 waiting polls")
            polls_key = api.ctx.store.keys.polls("host-a")
            await wait_until_async(lambda: client.zscore(polls_key, api.ctx.waiter.process_id))
            task = (await api.create_task(device_id="a1")).json()
            answers = await asyncio.wait_for(asyncio.gather(*polls), 15)
            # one poll got the task; the others, woken with it, found nothing and waited on
            assert [a.json()["task_id"] for a in answers if a.status_code == 200] == [task["task_id"]]
            # a hundred polls, woken and re-registered, never took more connections than the
            # configured count, as the master counts them: besides the pool's, the client keeps
            # the one it learned the slot map on, and the event feed one for its blocking read
            opened = len(node.client_list(_type="normal")) - before
            assert opened <= api.ctx.settings.redis_max_connections + 2
    finally:
        for key in list(_keys_and_values(node, prefix)):
            node.delete(key)
        node.close()
