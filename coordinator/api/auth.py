"""Who is calling: an operator (the bootstrap admin or an operator token), a host, or nobody we know.

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

Operators: the configured ``COORDINATOR_ADMIN_TOKEN`` is the bootstrap admin (every scope, actor
``admin``), checked in memory. An operator token (``tto_...``) is read on every request it comes
with (one read-only script: its digest, its record, the Redis clock), not cached: that one read
is what makes a revocation or an expiry hold on every process from its next request, reads
included, which a check inside the writing scripts alone would not. Any other secret is refused
without asking Redis. ``authorize`` is the one place a route's scope is enforced
(``app.py`` calls it for every operator route before the handler runs: credential, then scope,
then path, then body).

The cache mirrors ``host_tokens`` and must not outlive it: before it is read, the deployment's
epoch is confirmed (``coordinator/state/epoch.py``, at most one ``GET`` a second per process), and a
Redis that lost its data drops it. Within that second the heartbeat and device-enrollment
scripts refuse an enrolled host whose record is gone (and ``run_for`` drops the refused
credential at once), so no process recreates it; a claim may still wait on it, finding nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from pydantic import SecretStr
from redis.asyncio import Redis
from starlette.requests import Request

import wire
from coordinator.errors import ApiError, Forbidden, InsufficientScope, RequestTimeout, Unauthorized
from coordinator.state.epoch import Epoch
from coordinator.state.keys import Keys
from coordinator.state.reads.common import text
from coordinator.state.records import ADMIN_ACTOR, Actor, HostPrincipal, OperatorToken

_CACHE_LIMIT = 100_000

T = TypeVar("T")


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# A route any valid operator credential may call, whatever its scopes (``GET /api/v1/me``).
ANY_SCOPE = "any"
# last_used_at is written at most once per this interval per token.
TOUCH_INTERVAL_MS = 60_000
ADMIN_SCOPES = frozenset({wire.OperatorScope.ADMIN.value})


@dataclass(frozen=True)
class Operator:
    """An operator credential that is valid now: the bootstrap admin (``token_id`` None) or an
    operator token. Every event it causes names it by ``actor``: its name and its token's id."""

    name: str
    scopes: frozenset[str]
    token_id: str | None = None
    expires_at: int | None = None  # ms, Redis clock; None for the bootstrap admin
    team: str | None = None  # a token's team: every task it creates belongs to it

    def may(self, scope: str) -> bool:
        return scope == ANY_SCOPE or scope in self.scopes or wire.OperatorScope.ADMIN.value in self.scopes

    @property
    def actor(self) -> Actor:
        """Who its events name: its name, and its token's id beside it (names may repeat)."""
        return Actor(self.name, self.token_id) if self.token_id is not None else ADMIN_ACTOR


BOOTSTRAP_ADMIN = Operator(wire.BOOTSTRAP_ACTOR, ADMIN_SCOPES)


@dataclass(frozen=True)
class Access:
    """What a route's scope check let an operator do. ``owner``: the token id its changes are
    limited to (a token let in by a route's ``own_scope``, e.g. ``submit`` cancelling), else None."""

    operator: Operator
    owner: str | None = None


def access_for(operator: Operator, scope: str, own_scope: str | None = None) -> Access:
    """What ``operator`` may do on a route that needs ``scope`` (``own_scope``: the scope that
    lets a token in limited to what it created), or ``InsufficientScope`` (403). The one scope
    check: ``Authenticator.authorize`` makes it for every operator route, /mcp for every tool."""
    if operator.may(scope):
        return Access(operator)
    if own_scope is not None and operator.may(own_scope) and operator.token_id is not None:
        return Access(operator, owner=operator.token_id)
    raise InsufficientScope(scope)


# Where app.py leaves an operator route's Access in the request's ASGI scope for its handler.
ACCESS = "tether.access"


def access_of(request: Request) -> Access:
    """The operator calling this route, as ``Authenticator.authorize`` let it in."""
    access: Access = request.scope[ACCESS]
    return access


class OperatorTokenReader(Protocol):
    """What ``Authenticator`` needs to read operator tokens (``coordinator.state.store.Store`` is one)."""

    async def read_operator_token(self, digest: str) -> tuple[OperatorToken, int]: ...
    async def touch_operator_token(self, token_id: str, interval_ms: int) -> bool: ...


def bearer_secret(request: Request) -> str:
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or len(secret) > 1024:
        raise Unauthorized
    return secret


class Authenticator:
    def __init__(self, redis: Redis, keys: Keys, admin_token: SecretStr | None,
                 static_hosts: dict[str, SecretStr], epoch: Epoch | None = None,
                 operator_tokens: OperatorTokenReader | None = None) -> None:
        """``epoch``: confirmed before cached credentials are used, and drops them when Redis
        lost its data (None: the cache is trusted as long as the process lives).
        ``operator_tokens``: where operator tokens are read (None: only the bootstrap admin)."""
        self._redis = redis
        self._operator_tokens = operator_tokens
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

    async def operator(self, request: Request) -> Operator:
        """The operator calling, or ``Unauthorized`` (unknown, expired, revoked, malformed)."""
        secret = bearer_secret(request)
        digest = token_digest(secret)
        if self._admin_digest is not None and hmac.compare_digest(digest.encode(), self._admin_digest):
            return BOOTSTRAP_ADMIN
        if not secret.startswith(wire.OPERATOR_TOKEN_PREFIX) or self._operator_tokens is None:
            raise Unauthorized
        # Redis finds the token by the digest (a hash lookup): the secret itself is never compared
        # or kept, so there is no comparison whose timing could leak it.
        token, now_ms = await self._operator_tokens.read_operator_token(digest)
        if token.last_used_at is None or now_ms - token.last_used_at >= TOUCH_INTERVAL_MS:
            await self._operator_tokens.touch_operator_token(token.id, TOUCH_INTERVAL_MS)
        return Operator(token.name, frozenset(token.scopes), token.id, token.expires_at, token.team)

    async def authorize(self, request: Request, scope: str, own_scope: str | None = None) -> Access:
        """The operator, if it may call a route that needs ``scope``: 401 for a bad credential,
        then ``InsufficientScope`` (403). A token holding only ``own_scope`` is let in limited to
        what it created (``Access.owner``), which the route's script enforces."""
        return access_for(await self.operator(request), scope, own_scope)

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
                raise Unauthorized
            host_id = text(raw)
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
            raise Unauthorized

    async def parse_for(self, principal: HostPrincipal, parse: Awaitable[T]) -> T:
        """``parse``'s value; if it refuses the request, a revoked credential's 401 comes first
        (not for a body that never arrived: its 408 says nothing of what the body held, and the
        slow client costs no Redis call)."""
        try:
            return await parse
        except RequestTimeout:
            raise
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
