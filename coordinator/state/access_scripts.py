"""The scripts of access: enrollment tokens, managed hosts and their devices, operator tokens,
failed credentials counted; a part of ``Store``."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from coordinator.state.records import (
    ADMIN_ACTOR,
    Actor,
    EnrollmentToken,
    HostPrincipal,
    OperatorToken,
)
from coordinator.state.script_calls import ScriptCalls
from coordinator.state.scripts import NO_WAIT


@dataclass(frozen=True)
class AuthFailure:
    """A failed credential counted: how long its address stays throttled (ms; 0: it is not),
    and whether this failure began the throttle."""

    throttled_ms: int
    began: bool


class AccessScripts(ScriptCalls):
    """The access part of ``Store``: tokens, enrollment, failed credentials."""

    # -- managed hosts ---------------------------------------------------------------------

    async def create_enrollment_token(self, token_id: str, digest: str, ttl_ms: int, max_uses: int,
                                      labels_json: str, *, actor: Actor = ADMIN_ACTOR) -> EnrollmentToken:
        reply = await self._run(
            "createEnrollmentToken",
            [token_id, digest, ttl_ms, max_uses, labels_json, actor.name, actor.id],
        )
        return EnrollmentToken.from_json(reply[1])

    async def revoke_enrollment_token(self, token_id: str, *, actor: Actor = ADMIN_ACTOR) -> EnrollmentToken:
        reply = await self._run("revokeEnrollmentToken", [token_id, actor.name, actor.id])
        return EnrollmentToken.from_json(reply[1])

    async def record_auth_failure(self, address: str, allowed: int, window_ms: int,
                                  throttle_ms: int) -> AuthFailure:
        """Count a failed credential from ``address`` (coordinator/api/throttle.py). Never waits for
        replicas: a count a failover loses only lets a few more failures through."""
        reply = await self._run("recordAuthFailure", [address, allowed, window_ms, throttle_ms], NO_WAIT)
        return AuthFailure(throttled_ms=int(reply[1]), began=reply[2] == 1)

    # -- operator tokens -------------------------------------------------------------------

    async def create_operator_token(self, token_id: str, digest: str, name: str, scopes: list[str],
                                    ttl_ms: int, max_live: int, *, actor: Actor = ADMIN_ACTOR,
                                    team: str | None = None) -> OperatorToken:
        """``TokenLimit`` (409) when ``max_live`` unrevoked, unexpired tokens exist already.
        ``team``: every task the token creates belongs to it."""
        reply = await self._run(
            "createOperatorToken",
            [token_id, digest, name, orjson.dumps(scopes), ttl_ms, max_live, actor.name, actor.id, team or ""],
        )
        return OperatorToken.from_json(reply[1])

    async def revoke_operator_token(self, token_id: str, *, actor: Actor = ADMIN_ACTOR) -> OperatorToken:
        reply = await self._run("revokeOperatorToken", [token_id, actor.name, actor.id])
        return OperatorToken.from_json(reply[1])

    async def read_operator_token(self, digest: str) -> tuple[OperatorToken, int]:
        """The live token with this secret's digest and the Redis clock (ms); ``Unauthorized`` if
        it is unknown, revoked or expired. A read: never waits for replicas."""
        reply = await self._run("readOperatorToken", [digest], NO_WAIT)
        return OperatorToken.from_json(reply[1]), int(reply[2])

    async def touch_operator_token(self, token_id: str, interval_ms: int) -> bool:
        """Set ``last_used_at`` unless it was set less than ``interval_ms`` ago; whether it was."""
        reply = await self._run("touchOperatorToken", [token_id, interval_ms])
        return bool(reply[1] == 1)

    async def enroll_host(self, token_digest: str, enrollment_id: str, host_token_digest: str,
                          new_host_id: str, hostname: str, labels_json: str) -> tuple[str, bool]:
        reply = await self._run(
            "enrollHost",
            [token_digest, enrollment_id, host_token_digest, new_host_id, hostname, labels_json],
        )
        return reply[1].decode(), reply[2] == 1

    async def enroll_devices(self, host: HostPrincipal, devices: list[dict[str, str]],
                             max_devices: int) -> list[dict[str, str]]:
        reply = await self._run(
            "enrollDevices",
            [host.host_id, orjson.dumps(devices), host.digest, max_devices],
        )
        enrolled: list[dict[str, str]] = orjson.loads(reply[1])
        return enrolled

