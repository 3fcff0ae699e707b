"""Failed credentials are throttled per client address: after a burst, they get ``429`` instead of
``401`` for a while.

The error boundary (``boundary.py``) hands every ``Unauthorized`` here before answering it, so
the throttle only ever runs once a credential was already found missing, malformed, unknown,
expired or revoked, whichever principal it claimed to be (operator, enrollment or host). A valid
credential never reaches it, from any address: many hosts share one NAT address, and one
misconfigured agent must not lock out its lab.

Failures are counted in Redis (``lua/recordAuthFailure-1.lua``, keys with TTLs), so every process
agrees on who is throttled; the process whose failure began a throttle logs it, once, naming the
address (never the credential). If Redis cannot count, the failure keeps its ``401``.

The client address is the connection's peer, as the server reports it in the ASGI scope (``serve``
runs uvicorn without proxy headers, so that is the TCP peer). Behind a proxy every peer is the
proxy: with ``trust_forwarded_for`` the address is the rightmost ``X-Forwarded-For`` entry, the one
the proxy in front of the coordinator appended, which a client cannot forge (entries a client
sends itself stand to its left). An entry that is not an IP address is ignored, and the peer
used. IPv6 addresses are counted per /64, the block one subscriber is usually given.
"""

from __future__ import annotations

import ipaddress
import logging
import math

from redis.exceptions import RedisError
from starlette.types import Scope

from coordinator.errors import ApiError, RateLimited, Unauthorized
from coordinator.outage import OutageLog
from coordinator.state.store import Store

log = logging.getLogger("coordinator")

# The address of a request whose peer the server could not tell (a Unix socket).
UNKNOWN_ADDRESS = "unknown"


def _normalised(text: str) -> str | None:
    """The address ``text`` names, as counted (an IPv6 one as its /64), or None if it is not an
    IP address."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # a dual-stack socket's IPv4 peer
            return str(address.ipv4_mapped)
        return f"{ipaddress.IPv6Address(int(address) >> 64 << 64)}/64"
    return str(address)


def _rightmost_forwarded(scope: Scope) -> str | None:
    last = None
    for name, value in scope.get("headers", ()):
        if name == b"x-forwarded-for":
            last = value  # several header lines are one list, in order
    if last is None:
        return None
    return _normalised(last.decode("latin-1").rpartition(",")[2])


def client_address(scope: Scope, trust_forwarded_for: bool) -> str:
    """Whose failures a request's failure counts with."""
    if trust_forwarded_for:
        forwarded = _rightmost_forwarded(scope)
        if forwarded is not None:
            return forwarded
    client = scope.get("client")
    peer = _normalised(client[0]) if client and isinstance(client[0], str) else None
    return peer or UNKNOWN_ADDRESS


class FailureThrottle:
    """More than ``allowed`` failures from one address within ``window_ms``, and its failures get
    ``429`` for ``throttle_ms``."""

    def __init__(self, store: Store, *, allowed: int, window_ms: int, throttle_ms: int,
                 trust_forwarded_for: bool) -> None:
        self._store = store
        self._allowed = allowed
        self._window_ms = window_ms
        self._throttle_ms = throttle_ms
        self._trust_forwarded_for = trust_forwarded_for

    async def refusal(self, refused: Unauthorized, scope: Scope, outage: OutageLog) -> ApiError:
        """What a request whose credential was refused is answered: its ``401``, or ``429`` with
        ``Retry-After`` while its address is throttled. A Redis failure is told to ``outage``
        and the ``401`` stands."""
        address = client_address(scope, self._trust_forwarded_for)
        try:
            failure = await self._store.record_auth_failure(address, self._allowed, self._window_ms,
                                                            self._throttle_ms)
        except RedisError as exc:
            outage.failed(exc)
            return refused
        if not failure.throttled_ms:
            return refused
        if failure.began:
            route = getattr(scope.get("route"), "path", "unmatched")
            log.warning("client address %s throttled: more than %d failed credentials within %g s "
                        "(the last on %s); its failed credentials get 429 for %g s",
                        address, self._allowed, self._window_ms / 1000, route, self._throttle_ms / 1000,
                        extra={"client_address": address, "route": route})
        return RateLimited(max(1, math.ceil(failure.throttled_ms / 1000)))
