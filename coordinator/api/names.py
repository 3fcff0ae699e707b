"""The names people know hosts and devices by, for the views that show ids (issue 42: a task, its
events and a device's runs named ``h_abbd…``/``d_e208…`` while the hostname and the device's
serial were known): ``host_name`` is what the host calls itself (its agent's hostname, else the
one it enrolled with), ``device_name`` the local id a managed host enrolled the device with (its
serial), else the device id itself (a static host's device id is its local id).

Looked up per page of views, not per item: one read for the hosts not cached and one for the
devices not cached. A device's name never changes (enrollment maps one local id to one cloud id
for good, and a static device's id is its name), so it is kept; a host's name can change (its
agent reports another), so it is kept for ``ttl_s``, and every heartbeat this process serves
refreshes it for free. Bounded: at most
``max_entries`` of each, the least recently stored forgotten first. Names are for people: a view
whose name is a minute stale still carries the id that is exact.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar, cast

V = TypeVar("V")
View = TypeVar("View", bound=Mapping[str, Any])


class NameReads(Protocol):
    async def host_names(self, host_ids: list[str]) -> dict[str, str | None]: ...

    async def device_local_ids(self, device_ids: list[str]) -> dict[str, str | None]: ...


class Names:
    def __init__(self, reads: NameReads, *, ttl_s: float = 60.0, max_entries: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reads = reads
        self._ttl_s = ttl_s
        self._max = max_entries
        self._clock = clock
        self._hosts: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        self._devices: OrderedDict[str, str] = OrderedDict()

    def heard(self, host_id: str, hostname: str | None) -> None:
        """A heartbeat of ``host_id`` reported ``hostname``."""
        if hostname:
            self._keep(self._hosts, host_id, (hostname, self._clock()))

    async def hosts(self, host_ids: Iterable[str | None]) -> dict[str, str | None]:
        wanted = {h for h in host_ids if h}
        now = self._clock()
        fresh = {h: self._hosts[h][0] for h in wanted if h in self._hosts and now - self._hosts[h][1] < self._ttl_s}
        missing = sorted(wanted - fresh.keys())
        for host_id, name in (await self._reads.host_names(missing)).items():
            self._keep(self._hosts, host_id, (name, now))
            fresh[host_id] = name
        return fresh

    async def devices(self, device_ids: Iterable[str | None]) -> dict[str, str]:
        wanted = {d for d in device_ids if d}
        known = {d: self._devices[d] for d in wanted if d in self._devices}
        missing = sorted(wanted - known.keys())
        for device_id, local_id in (await self._reads.device_local_ids(missing)).items():
            # For good either way: an enrolled id keeps its local id, and a static host's device
            # id is never a cloud id minted later.
            known[device_id] = local_id or device_id
            self._keep(self._devices, device_id, known[device_id])
        return known

    async def add(self, views: list[View]) -> list[View]:
        """``views`` (tasks, events, runs, devices; the feed's events), in place: where one has
        a ``host_id``, ``host_name`` beside it, and where it has a ``device_id``,
        ``device_name`` (null where the id is)."""
        hosts = await self.hosts(v.get("host_id") for v in views)
        devices = await self.devices(v.get("device_id") for v in views)
        for shown in views:
            view = cast("dict[str, Any]", shown)  # a shape that names host_name and device_name beside the ids
            if "host_id" in view:
                host_id = view["host_id"]
                view["host_name"] = hosts.get(host_id) if host_id else None
            if "device_id" in view:
                device_id = view["device_id"]
                view["device_name"] = devices.get(device_id) if device_id else None
        return views

    def _keep(self, cache: OrderedDict[str, V], key: str, value: V) -> None:
        cache.pop(key, None)
        cache[key] = value
        while len(cache) > self._max:
            cache.popitem(last=False)
