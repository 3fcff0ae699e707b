"""Helpers of the coordinator tests: move the clock for one lease or host instead of sleeping until
it moves, set up common states, snapshot everything stored under the test's prefix, and close a
Redis connection behind the event loop's back."""

from __future__ import annotations

from typing import Any

import redis

from tests.support import REAL_REDIS_URL, glob_escape


async def expire_lease(api: Any, assignment: dict[str, Any]) -> None:
    """End the assignment's lease as its TTL running out would: its key gone and its deadline, the
    reaper's index, in the past."""
    await expire_task_lease(api.ctx.store, assignment["task_id"])


async def expire_task_lease(store: Any, task_id: str) -> None:
    """expire_lease, by the store and the task's id."""
    await store.redis.delete(store.keys.lease(task_id))
    await store.redis.zadd(store.keys.lease_deadlines, {task_id: 0})


async def silence_host(api: Any, host_id: str) -> None:
    """Make the host's last heartbeat lie beyond the offline threshold: in the sweep's index and in
    the state placement reads."""
    keys = api.ctx.store.keys
    await api.ctx.store.redis.zadd(keys.hosts_online, {host_id: 0})
    await api.ctx.store.redis.hset(keys.host_state(host_id), "seen", 0)


async def claim_one(api: Any, host: str, **kwargs: Any) -> dict[str, Any]:
    response = await api.claim(host, **kwargs)
    assert response.status_code == 200, response.text
    return response.json()


def nested(depth: int) -> Any:
    """A JSON value whose containers nest ``depth`` levels."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


async def running_task(api: Any) -> dict[str, Any]:
    """One task running on host-a's device a1, claimed with claim id c-1."""
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    return await claim_one(api, "host-a", claim_id="c-1")


async def enrolled_host(api: Any) -> tuple[str, dict[str, str]]:
    """Enroll a managed host through a fresh token: its id and its request headers."""
    token = (await api.client.post("/api/v1/enrollment-tokens", headers=api.admin_headers, json={})).json()
    host_token = "h" * 40
    enrolled = await api.client.post(
        "/internal/v1/enroll", headers={"authorization": f"Bearer {token['token']}"},
        json={"enrollment_id": "e-1", "host_token": host_token},
    )
    assert enrolled.status_code == 201
    return enrolled.json()["host_id"], {"authorization": f"Bearer {host_token}"}


async def redis_state(api: Any) -> dict[str, Any]:
    """Everything the service stores under the test's prefix: its fixed keys and every key
    derived from an id (a host's assignments, a lease, a task's history...). Not the failure
    throttle's counters (coordinator/api/throttle.py): counting a refused credential is what they
    are for, and no request's outcome but a later refusal's depends on them."""
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    throttle_keys = (keys.auth_failures(""), keys.auth_throttled(""))
    snapshot: dict[str, Any] = {}
    async for raw in redis.scan_iter(match=glob_escape(keys.base) + "*", count=1000):
        key = raw.decode()
        if key.startswith(throttle_keys):
            continue
        name = key[len(keys.base):]
        kind = (await redis.type(key)).decode()
        if kind == "hash":
            snapshot[name] = await redis.hgetall(key)
        elif kind == "zset":
            snapshot[name] = await redis.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            snapshot[name] = await redis.smembers(key)
        elif kind == "string":
            snapshot[name] = await redis.get(key)
        elif kind == "list":
            snapshot[name] = await redis.lrange(key, 0, -1)
        elif kind == "stream":
            snapshot[name] = await redis.xrange(key)
    return snapshot


class ClosedConnection:
    """A pooled Redis connection whose server was killed: uvloop refuses the write."""

    def __init__(self) -> None:
        self.disconnected = False

    @property
    def is_connected(self) -> bool:  # open, as far as this process has read
        return not self.disconnected

    def pack_commands(self, commands: list[Any]) -> list[bytes]:
        return [b"packed"]

    async def send_packed_command(self, packed: Any) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")

    async def disconnect(self) -> None:
        self.disconnected = True


def close_unseen(name: str) -> None:
    """Redis closes the client connection named ``name``, and the event loop of the caller has not
    read that yet: the kill is sent from a blocking client, so the loop reads nothing until its
    next await (as with a Redis restarted just before a write, or a connection a NAT forgot)."""
    killer = redis.Redis.from_url(REAL_REDIS_URL)
    try:
        killed = next(e["id"] for e in killer.client_list() if e.get("name") == name)
        killer.client_kill_filter(_id=killed)
    finally:
        killer.close()
