"""The scripts of access: enrollment tokens, managed hosts and their devices, operator tokens,
failed credentials counted; a part of ``Store``."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from coordinator.errors import error_for
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
        k = self.keys
        reply = await self._run(
            "createEnrollmentToken",
            [k.enrollment_tokens, k.enrollment_token_hashes, k.enrollment_tokens_by_age, k.feed],
            [token_id, digest, ttl_ms, max_uses, labels_json, actor.name, actor.id],
        )
        return EnrollmentToken.from_json(reply[1])

    async def revoke_enrollment_token(self, token_id: str, *, actor: Actor = ADMIN_ACTOR) -> EnrollmentToken:
        k = self.keys
        reply = await self._run("revokeEnrollmentToken", [k.enrollment_tokens, k.feed],
                                [token_id, actor.name, actor.id])
        return EnrollmentToken.from_json(reply[1])

    async def record_auth_failure(self, address: str, allowed: int, window_ms: int,
                                  throttle_ms: int) -> AuthFailure:
        """Count a failed credential from ``address`` (coordinator/api/throttle.py). Never waits for
        replicas: a count a failover loses only lets a few more failures through."""
        reply = await self._scripts["recordAuthFailure"](
            self.transport, [self.keys.auth_failures(address), self.keys.auth_throttled(address)],
            [allowed, window_ms, throttle_ms], NO_WAIT)
        return AuthFailure(throttled_ms=int(reply[1]), began=reply[2] == 1)

    # -- operator tokens -------------------------------------------------------------------

    async def create_operator_token(self, token_id: str, digest: str, name: str, scopes: list[str],
                                    ttl_ms: int, max_live: int, *, actor: Actor = ADMIN_ACTOR,
                                    team: str | None = None) -> OperatorToken:
        """``TokenLimit`` (409) when ``max_live`` unrevoked, unexpired tokens exist already.
        ``team``: every task the token creates belongs to it."""
        k = self.keys
        reply = await self._run(
            "createOperatorToken",
            [k.operator_tokens, k.operator_token_hashes, k.operator_tokens_by_age, k.operator_tokens_live,
             k.feed, k.teams],
            [token_id, digest, name, orjson.dumps(scopes), ttl_ms, max_live, actor.name, actor.id,
             team or "", k.base],
        )
        return OperatorToken.from_json(reply[1])

    async def revoke_operator_token(self, token_id: str, *, actor: Actor = ADMIN_ACTOR) -> OperatorToken:
        k = self.keys
        reply = await self._run(
            "revokeOperatorToken",
            [k.operator_tokens, k.operator_token_hashes, k.operator_tokens_live, k.feed],
            [token_id, actor.name, actor.id, k.base],
        )
        return OperatorToken.from_json(reply[1])

    async def read_operator_token(self, digest: str) -> tuple[OperatorToken, int]:
        """The live token with this secret's digest and the Redis clock (ms); ``Unauthorized`` if
        it is unknown, revoked or expired. A read: never waits for replicas."""
        k = self.keys
        reply = await self._scripts["readOperatorToken"](
            self.transport, [k.operator_token_hashes, k.operator_tokens], [digest], NO_WAIT, self.clock.offset_ms)
        if reply[0] != 0:
            raise error_for(reply[0])
        return OperatorToken.from_json(reply[1]), int(reply[2])

    async def touch_operator_token(self, token_id: str, interval_ms: int) -> bool:
        """Set ``last_used_at`` unless it was set less than ``interval_ms`` ago; whether it was."""
        reply = await self._run("touchOperatorToken", [self.keys.operator_tokens], [token_id, interval_ms])
        return bool(reply[1] == 1)

    async def enroll_host(self, token_digest: str, enrollment_id: str, host_token_digest: str,
                          new_host_id: str, hostname: str, labels_json: str) -> tuple[str, bool]:
        k = self.keys
        reply = await self._run(
            "enrollHost",
            [k.enrollment_token_hashes, k.enrollment_tokens, k.enrollments, k.hosts, k.host_tokens,
             k.revoked_tokens, k.host_ids],
            [token_digest, enrollment_id, host_token_digest, new_host_id, hostname, labels_json],
        )
        return reply[1].decode(), reply[2] == 1

    async def enroll_devices(self, host: HostPrincipal, devices: list[dict[str, str]],
                             max_devices: int) -> list[dict[str, str]]:
        k = self.keys
        reply = await self._run(
            "enrollDevices",
            [k.hosts, k.local_devices, k.enrolled_devices, k.revoked_tokens],
            [host.host_id, orjson.dumps(devices), host.digest, max_devices],
        )
        enrolled: list[dict[str, str]] = orjson.loads(reply[1])
        return enrolled

