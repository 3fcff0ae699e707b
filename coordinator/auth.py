"""Who is calling: the admin, a host, or nobody we know.

Secrets are never kept or compared in plain text: the service holds SHA-256 digests and compares
digests in constant time. Every unknown, missing or malformed credential gets the same
``Unauthorized``, whatever path it was sent to, so a caller cannot learn which host ids exist.
Host-scoped authorization (``host_for_path``) is decided before any state of the path's host is
read.

Revocation is bound to the credential (its digest is in the ``revoked_tokens`` set), not to the
host id, so a static host whose token is rotated in configuration works again. It is checked
inside every host script, atomically with the operation, which is what lets enrolled-token lookups
be cached here without delaying a revocation made through another process. The checks run in the
contract's order, credential, then path, then body: a request that would be refused for its path
or its body first asks Redis whether its credential is still live (``ensure_live``), so a revoked
credential gets 401 whatever else is wrong with the request. That costs a round trip only on the
error path.

The cache mirrors ``host_tokens`` and must not outlive it: before it is read, the deployment's
epoch is confirmed (``coordinator/epoch.py``, at most one ``GET`` a second per process), and a
Redis that lost its data drops it. Within that second the heartbeat and device-enrollment
scripts refuse an enrolled host whose record is gone (and ``run_for`` drops the refused
credential at once), so no process recreates it; a claim may still wait on it, finding nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import SecretStr
from redis.asyncio import Redis
from starlette.requests import Request

from coordinator.epoch import Epoch
from coordinator.errors import ApiError, Forbidden, Unauthorized
from coordinator.keys import Keys
from coordinator.validation import header

_CACHE_LIMIT = 100_000

T = TypeVar("T")


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class HostPrincipal:
    host_id: str
    kind: str  # "static" or "enrolled"
    # SHA-256 of the credential it presented: what revocation is bound to. Not a secret, but
    # kept out of reprs and logs all the same.
    digest: str = field(repr=False)


def bearer_secret(request: Request) -> str:
    scheme, _, secret = (header(request, b"authorization") or "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or len(secret) > 1024:
        raise Unauthorized()
    return secret


class Authenticator:
    def __init__(self, redis: Redis, keys: Keys, admin_token: SecretStr | None,
                 static_hosts: dict[str, SecretStr], epoch: Epoch | None = None) -> None:
        """``epoch``: confirmed before cached credentials are used, and drops them when Redis
        lost its data (None: the cache is trusted as long as the process lives)."""
        self._redis = redis
        self._keys = keys
        self._admin_digest = (
            token_digest(admin_token.get_secret_value()).encode() if admin_token is not None else None
        )
        # digest -> host id; a configured "sha256:<hex>" is already a digest.
        self._static: dict[str, str] = {}
        for host_id, token in static_hosts.items():
            value = token.get_secret_value()
            digest = value[7:].lower() if value.startswith("sha256:") else token_digest(value)
            self._static[digest] = host_id
        self._static_digests = {host_id: digest for digest, host_id in self._static.items()}
        self.static_host_ids = frozenset(static_hosts)
        self._enrolled_cache: dict[str, str] = {}
        # Bumped whenever the cache is dropped: a lookup that began before does not fill it.
        self._generation = 0
        self._epoch = epoch
        if epoch is not None:
            epoch.on_change(self.drop_cache)

    def require_admin(self, request: Request) -> None:
        digest = token_digest(bearer_secret(request)).encode()
        if self._admin_digest is None or not hmac.compare_digest(digest, self._admin_digest):
            raise Unauthorized()

    async def host(self, request: Request) -> HostPrincipal:
        digest = token_digest(bearer_secret(request))
        static = self._static.get(digest)
        if static is not None:
            return HostPrincipal(static, "static", digest)
        if self._epoch is not None:
            await self._epoch.confirm()
        host_id = self._enrolled_cache.get(digest)
        if host_id is None:
            generation = self._generation
            raw = await self._redis.hget(self._keys.host_tokens, digest)
            if raw is None:
                raise Unauthorized()
            host_id = raw.decode()
            if generation == self._generation:
                if len(self._enrolled_cache) >= _CACHE_LIMIT:
                    self._enrolled_cache.clear()
                self._enrolled_cache[digest] = host_id
        return HostPrincipal(host_id, "enrolled", digest)

    async def host_for_path(self, request: Request, path_host_id: str) -> HostPrincipal:
        """The caller, if it is the host named in the path: 401 for strangers, 403 for others."""
        principal = await self.host(request)
        if not hmac.compare_digest(principal.host_id.encode(), path_host_id.encode()):
            await self.ensure_live(principal)
            raise Forbidden("this credential is bound to another host")
        return principal

    async def ensure_live(self, principal: HostPrincipal) -> None:
        """``Unauthorized`` if the credential was revoked, by this process or another."""
        if await self._redis.sismember(self._keys.revoked_tokens, principal.digest):
            self._enrolled_cache.pop(principal.digest, None)
            raise Unauthorized()

    async def parse_for(self, principal: HostPrincipal, parse: Awaitable[T]) -> T:
        """``parse``'s value; if it refuses the request, a revoked credential's 401 comes first."""
        try:
            return await parse
        except ApiError:
            await self.ensure_live(principal)
            raise

    async def run_for(self, principal: HostPrincipal, call: Awaitable[T]) -> T:
        """``call``'s value; if its script refused the credential (revoked, or a host Redis no
        longer knows), this process stops trusting its cached copy at once."""
        try:
            return await call
        except Unauthorized:
            self._enrolled_cache.pop(principal.digest, None)
            raise

    def static_digest(self, host_id: str) -> str | None:
        """The configured credential's digest of a static host, None for any other host id."""
        return self._static_digests.get(host_id)

    def drop_cache(self) -> None:
        """Forget every cached credential (Redis lost the data they were read from)."""
        self._enrolled_cache.clear()
        self._generation += 1

    def forget(self, host_id: str) -> None:
        """Drop cached credentials of a revoked host (the scripts refuse it regardless)."""
        for digest in [d for d, h in self._enrolled_cache.items() if h == host_id]:
            del self._enrolled_cache[digest]
