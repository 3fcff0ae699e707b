"""Who is calling: the admin, a host, or nobody we know.

Secrets are never kept or compared in plain text: the service holds SHA-256 digests and compares
digests in constant time. Every unknown, missing or malformed credential gets the same
``Unauthorized``, whatever path it was sent to, so a caller cannot learn which host ids exist.
Host-scoped authorization (``host_for_path``) is decided before any state of the path's host is
read. Revocation is checked inside every host script, atomically with the operation, which is
what lets enrolled-token lookups be cached here without delaying a revocation.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from pydantic import SecretStr
from redis.asyncio import Redis
from starlette.requests import Request

from coordinator.errors import Forbidden, Unauthorized
from coordinator.keys import Keys

HOST_TOKEN_MIN_CHARS = 32
_CACHE_LIMIT = 100_000


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class HostPrincipal:
    host_id: str
    kind: str  # "static" or "enrolled"


def bearer_secret(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or len(secret) > 1024:
        raise Unauthorized()
    return secret


class Authenticator:
    def __init__(self, redis: Redis, keys: Keys, admin_token: SecretStr | None,
                 static_hosts: dict[str, SecretStr]) -> None:
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
        self.static_host_ids = frozenset(static_hosts)
        self._enrolled_cache: dict[str, str] = {}

    def require_admin(self, request: Request) -> None:
        digest = token_digest(bearer_secret(request)).encode()
        if self._admin_digest is None or not hmac.compare_digest(digest, self._admin_digest):
            raise Unauthorized()

    async def host(self, request: Request) -> HostPrincipal:
        digest = token_digest(bearer_secret(request))
        static = self._static.get(digest)
        if static is not None:
            return HostPrincipal(static, "static")
        host_id = self._enrolled_cache.get(digest)
        if host_id is None:
            raw = await self._redis.hget(self._keys.host_tokens, digest)
            if raw is None:
                raise Unauthorized()
            host_id = raw.decode()
            if len(self._enrolled_cache) >= _CACHE_LIMIT:
                self._enrolled_cache.clear()
            self._enrolled_cache[digest] = host_id
        return HostPrincipal(host_id, "enrolled")

    async def host_for_path(self, request: Request, path_host_id: str) -> HostPrincipal:
        """The caller, if it is the host named in the path: 401 for strangers, 403 for others."""
        principal = await self.host(request)
        if not hmac.compare_digest(principal.host_id.encode(), path_host_id.encode()):
            raise Forbidden("this credential is bound to another host")
        return principal

    def forget(self, host_id: str) -> None:
        """Drop cached credentials of a revoked host (the scripts refuse it regardless)."""
        for digest in [d for d, h in self._enrolled_cache.items() if h == host_id]:
            del self._enrolled_cache[digest]
