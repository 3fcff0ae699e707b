"""What every part of ``Store`` shares: how it runs a script of lua/ (its failure raised as the
contract's exception) in the deployment every script takes first (lua/includes/deployment.lua)."""

from __future__ import annotations

from typing import Any

from coordinator.clock import ShiftedClock
from coordinator.errors import error_for
from coordinator.settings import CANDIDATES_SCANNED
from coordinator.state.keys import Keys
from coordinator.state.records import HostPrincipal
from coordinator.state.scripts import INBOX_TTL_MS, NO_WAIT, Deployment, Durability, Script, load_scripts
from coordinator.transport.base import RedisTransport


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class ScriptCalls:
    """The part of ``Store`` every concern shares; ``Store`` is the one object callers use."""

    def __init__(self, redis: RedisTransport, keys: Keys, *, host_offline_after_ms: int,
                 claim_timeout_ms: int = 60_000, retention_ms: int = 7 * 24 * 3600 * 1000,
                 inbox_ttl_ms: int = INBOX_TTL_MS, durability: Durability = NO_WAIT,
                 scripts: dict[str, Script] | None = None, candidates_scanned: int = CANDIDATES_SCANNED,
                 clock: ShiftedClock | None = None) -> None:
        self.transport = redis  # script calls
        self.redis = redis.client  # every other command
        self.keys = keys
        self.durability = durability
        # Moved by tests only (coordinator/clock.py); the service's stays at 0.
        self.clock = clock if clock is not None else ShiftedClock()
        self._candidates_scanned = candidates_scanned
        # Every script of lua/, loaded into Redis by load_scripts(); the read-only ones are
        # shared with the queries.
        self._scripts: dict[str, Script] = scripts if scripts is not None else load_scripts()
        self._library = next(iter(self._scripts.values())).library
        # KEYS[1] and ARGV[1..5] of every script (lua/includes/deployment.lua): the key names the
        # slot, and the scripts derive every key they touch from the key base.
        self.deployment = Deployment(keys, host_offline_after_ms, inbox_ttl_ms, claim_timeout_ms, retention_ms)

    # -- scripts -------------------------------------------------------------------------

    async def load_scripts(self) -> None:
        await self._library.load(self.redis)

    async def scripts_loaded(self) -> bool:
        return self._library.loaded and await self._library.present(self.redis)

    async def _run(self, name: str, args: list[Any], durability: Durability | None = None) -> list[Any]:
        """Run a script of lua/ with its own ``args``, after the deployment's key and settings;
        ``durability`` overrides the store's."""
        reply: list[Any] = await self._scripts[name](
            self.transport, self.deployment, args, self.durability if durability is None else durability,
            self.clock.offset_ms)
        if reply[0] != 0:
            detail = reply[1] if len(reply) > 1 else None
            if isinstance(detail, bytes):
                detail = detail.decode()
            raise error_for(reply[0], detail)
        return reply

    async def _on_lease(self, name: str, host: HostPrincipal, lease_id: str, task_id: str, attempt: int,
                        args: list[Any]) -> list[Any]:
        """Run a script about the lease a host presents (lua/includes/common.lua, requestLease):
        the request's claim to it comes first."""
        return await self._run(name, [host.host_id, lease_id, task_id, attempt, host.digest, *args])

