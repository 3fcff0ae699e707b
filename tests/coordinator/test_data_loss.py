"""Redis lost its data (restarted empty, flushed, a replica promoted without it) while hosts ran:
what processes kept in memory must not outlive it (DESIGN.md, "One notion of each state").

The loss is simulated by deleting every key of the test's prefix (never FLUSHDB: Redis is shared);
on fakeredis, whose server is the test's own, the script library is dropped as well, as a real
restart without persistence drops it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis

from coordinator.api.auth import HostPrincipal
from coordinator.errors import Unauthorized
from coordinator.state.store import Store
from tests.conftest import Api, unique_prefix
from tests.coordinator.helpers import redis_state
from tests.coordinator.test_managed_hosts import Managed, make_token, new_host
from tests.support import delete_prefix_async, wait_until_async

pytestmark = pytest.mark.anyio

SNAPSHOT = '{"agent":{},"devices":[]}'


async def lose_data(redis: aioredis.Redis, prefix: str) -> None:
    await delete_prefix_async(redis, prefix)
    if isinstance(redis, fakeredis.FakeAsyncRedis):
        await redis.function_flush()


async def managed_host_running(api: Api) -> tuple[Managed, str]:
    """An enrolled host with one device, heartbeating: its credential is in the process's cache."""
    host = await new_host(api)
    enrolled = await host.enroll_devices(("p1", "sim"))
    assert enrolled.status_code == 200, enrolled.text
    device_id = enrolled.json()["devices"][0]["device_id"]
    assert (await host.heartbeat((device_id, "sim"))).status_code == 200
    return host, device_id


async def test_a_cached_enrolled_credential_is_refused_once_redis_lost_its_data(
        api: Api, redis_client: aioredis.Redis) -> None:
    host, device_id = await managed_host_running(api)
    await lose_data(redis_client, api.ctx.settings.key_prefix)

    # Seen: 409 unknown_device, 200 with an empty host record recreated, 403 on re-enrollment.
    assert (await host.heartbeat((device_id, "sim"))).status_code == 401
    assert (await host.heartbeat()).status_code == 401
    assert (await host.enroll_devices(("p1", "sim"))).status_code == 401
    assert (await host.claim()).status_code == 401
    view = await api.client.get(f"/api/v1/hosts/{host.host_id}", headers=api.admin_headers)
    assert view.status_code == 404
    # Refused requests change nothing: only the new epoch was written.
    assert set(await redis_state(api)) <= {"epoch"}


async def test_every_process_agrees_once_redis_lost_its_data(
        api_factory: Callable[..., Any], redis_client: aioredis.Redis) -> None:
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as first, api_factory(prefix=prefix) as second:
        host, device_id = await managed_host_running(first)  # only the first has it cached
        await lose_data(redis_client, prefix)

        # A claim's script cannot tell a lost host from one with no work: the process that
        # cached the credential trusts it for the epoch's check interval, and no longer.
        await wait_until_async(lambda: _refused(host.claim()), timeout=5,
                               what="the process with the cached credential to refuse it")
        calls: list[tuple[str, str, Any]] = [
            ("POST", "claim?wait_s=0", {}),
            ("PUT", "heartbeat", {"devices": []}),
            ("PUT", "heartbeat", {"devices": [{"device_id": device_id, "driver": "sim", "status": "available"}]}),
            ("POST", "devices/enroll", {"devices": [{"local_id": "p1", "driver": "sim"}]}),
        ]
        for api in (first, second):
            for method, path, body in calls:
                response = await api.client.request(method, f"{host.path}/{path}", json=body, headers=host.headers)
                assert response.status_code == 401, (path, response.text)
        assert set(await redis_state(first)) <= {"epoch"}

        # Both work on the new data: scripts loaded again, credentials read afresh.
        again = await new_host(second)
        for api in (first, second):
            managed = Managed(api, again.host_id, again.host_token)
            enrolled = await managed.enroll_devices(("p1", "sim"))
            assert enrolled.status_code == 200, enrolled.text
            assert (await managed.heartbeat((enrolled.json()["devices"][0]["device_id"], "sim"))).status_code == 200


async def _refused(response: Any) -> bool:
    return (await response).status_code == 401


async def test_the_epoch_is_written_at_start_and_anew_when_redis_lost_it(
        api_factory: Callable[..., Any], redis_client: aioredis.Redis) -> None:
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as api:
        key = api.ctx.store.keys.epoch
        first = await redis_client.get(key)
        assert first
        host, _ = await managed_host_running(api)
        await lose_data(redis_client, prefix)

        async def renewed() -> bool:
            await host.claim()  # reads the cached credential: confirms the epoch when due
            return await redis_client.get(key) is not None
        await wait_until_async(renewed, timeout=5, what="a new epoch")
        assert await redis_client.get(key) != first
        assert api.ctx.epoch.changes == 1
        # A second process started now shares the epoch rather than writing its own.
        async with api_factory(prefix=prefix) as other:
            assert other.ctx.epoch.changes == 0
            current = await redis_client.get(key)
            token = await make_token(other)
            assert token["token"] and await redis_client.get(key) == current


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def test_a_heartbeat_never_creates_an_enrolled_hosts_record(store: Store) -> None:
    ghost = HostPrincipal("h_ghost", "enrolled", _digest("tht_" + "g" * 40))
    with pytest.raises(Unauthorized):
        await store.heartbeat(ghost, SNAPSHOT)
    assert await store.redis.hexists(store.keys.hosts, "h_ghost") == 0
    assert await store.redis.hexists(store.keys.host_snapshots, "h_ghost") == 0
    with pytest.raises(Unauthorized):
        await store.enroll_devices(ghost, [{"local_id": "p1", "driver": "sim", "attributes": "{}",
                                            "new_id": "d_1"}], 8)
    assert await store.redis.hlen(store.keys.enrolled_devices) == 0

    # A static host's first heartbeat still creates its record.
    static = HostPrincipal("s-1", "static", _digest("static-token-0123456789"))
    assert await store.heartbeat(static, SNAPSHOT) is False
    assert await store.redis.hexists(store.keys.hosts, "s-1") == 1


async def test_an_enrolled_heartbeat_must_present_the_credential_its_record_holds(api: Api) -> None:
    host = await new_host(api)
    # The host id of one enrolled host with the token of another: refused by the script too, not
    # only by the lookup in front of it.
    other = await new_host(api)
    impostor = HostPrincipal(host.host_id, "enrolled", _digest(other.host_token))
    with pytest.raises(Unauthorized):
        await api.ctx.store.heartbeat(impostor, SNAPSHOT)
    assert (await host.heartbeat()).status_code == 200
