"""Test helpers that move the clock for one lease or host, instead of sleeping until it moves."""

from __future__ import annotations

from typing import Any


async def expire_lease(api: Any, lease_id: str) -> None:
    """Make the lease's deadline lie in the past, as if its TTL had run out."""
    await api.ctx.store.redis.zadd(api.ctx.store.keys.lease_deadlines, {lease_id: 0})


async def silence_host(api: Any, host_id: str) -> None:
    """Make the host's last heartbeat lie beyond the offline threshold."""
    await api.ctx.store.redis.zadd(api.ctx.store.keys.hosts_online, {host_id: 0})


async def claim_one(api: Any, host: str, **kwargs: Any) -> dict[str, Any]:
    response = await api.claim(host, **kwargs)
    assert response.status_code == 200, response.text
    return response.json()
