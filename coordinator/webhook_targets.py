"""Where a webhook may post (PROTOCOL.md, "Webhooks"), and the one network path deliveries take.

A webhook whose host is, or resolves to, a loopback, link-local (a cloud's metadata service) or
unspecified address would let an admin's URL reach the coordinator's own machine: its Redis, its
metrics, the metadata service's credentials. Those are refused unless
``COORDINATOR_WEBHOOK_ALLOW_NETWORKS`` lists them (``TargetPolicy``). Private ranges stay allowed:
a lab's CI usually lives on its LAN.

Checked twice:
- at registration (``TargetPolicy.refusal``: a clear ``400``). A name that does not resolve now
  is accepted, since a delivery checks again;
- at every connection a delivery makes (``GuardedNetwork``, the httpcore network backend of the
  delivery loop's pool): it resolves the name itself, refuses the connection when any address is
  not allowed, and connects to an address it checked. So a name that resolves elsewhere later,
  or between a check and a connect (DNS rebinding), reaches nothing it should not.

Names are resolved with the system's resolver (``getaddrinfo``), which reads ``2130706433``,
``0x7f.1``, ``127.1`` and ``0`` as the addresses they are, as the connection would.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# "This host on this network": the kernel takes 0.x.x.x for the machine itself.
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
# How long registration waits for a name to resolve before it accepts the URL (a delivery checks
# again): an admin's request never hangs on a slow resolver.
RESOLVE_AT_REGISTRATION_S = 2.0


def parse_networks(text: str) -> tuple[Network, ...]:
    """``COORDINATOR_WEBHOOK_ALLOW_NETWORKS``: comma-separated CIDRs (``127.0.0.0/8, ::1/128``; a
    bare address is its own /32 or /128). ``ValueError`` naming the entry that is not one."""
    networks = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not a CIDR (for example 127.0.0.0/8 or 10.1.2.3/32)") from None
    return tuple(networks)


def _plain(address: Address) -> Address:
    """An IPv4-mapped IPv6 address (``::ffff:127.0.0.1``) as the IPv4 address it reaches."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _kind(address: Address) -> str | None:
    """What makes ``address`` one a webhook may not reach by default, or None."""
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_unspecified or (isinstance(address, ipaddress.IPv4Address) and address in _THIS_NETWORK):
        return "unspecified"
    return None


async def resolve(host: str, port: int) -> list[Address]:
    """Every address ``host`` names (a literal, in any form the system reads, or a name), in the
    resolver's order. ``OSError`` (``socket.gaierror``) when it names none."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[Address] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])  # an IPv6 scope is not ours
        if address not in found:
            found.append(address)
    return found


@dataclass(frozen=True)
class TargetPolicy:
    """The networks a webhook may reach beyond the public and private ranges."""

    allowed: tuple[Network, ...] = ()

    def refused(self, addresses: Iterable[Address]) -> str | None:
        """Why one of ``addresses`` may not be reached (``"a loopback address"``), or None."""
        for address in addresses:
            plain = _plain(address)
            kind = _kind(plain)
            if kind is not None and not any(plain in n or address in n for n in self.allowed):
                return f"a {kind} address"
        return None

    async def refusal(self, url: str, resolve_timeout_s: float = RESOLVE_AT_REGISTRATION_S) -> str | None:
        """Why a webhook may not post to ``url`` (already a valid http(s) URL with a host), in
        words for a ``400``; None when it may. The message names the kind of address, never
        the address a name resolved to (the URL is the admin's own, the resolver's view is not)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            async with asyncio.timeout(resolve_timeout_s):
                addresses = await resolve(host, port)
        except (OSError, TimeoutError, UnicodeError):
            return None  # not resolvable now: each delivery checks again
        reason = self.refused(addresses)
        if reason is None:
            return None
        return (f"must not reach {reason} (the coordinator's own machine or its cloud's metadata) "
                "unless COORDINATOR_WEBHOOK_ALLOW_NETWORKS lists it")


class TargetRefused(httpcore.ConnectError):
    """A delivery's host resolved to an address the policy refuses: nothing was connected."""


class Unresolved(httpcore.ConnectError):
    """A delivery's host resolved to no address."""


class GuardedNetwork(httpcore.AsyncNetworkBackend):
    """httpcore's own network backend, connecting only to addresses ``policy`` allows: the name
    is resolved here and the connection made to an address this check saw (TLS still verifies
    the URL's host name, which httpcore hands to ``start_tls`` itself)."""

    def __init__(self, policy: TargetPolicy, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                          ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await resolve(host, port)
        except (OSError, UnicodeError):
            raise Unresolved("the host name did not resolve") from None
        if not addresses:
            raise Unresolved("the host name did not resolve")
        reason = self._policy.refused(addresses)
        if reason is not None:
            raise TargetRefused(f"the host resolved to {reason}")
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                                  ) -> httpcore.AsyncNetworkStream:
        raise TargetRefused("a webhook never posts to a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
