"""Reads of the fleet: devices with their reservation and their host's state, pages of them,
a device's runs, and hosts. Nothing here changes state (``store.py`` does, through scripts)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import orjson

import wire
from coordinator.state.reads.common import (
    BATCH,
    SCAN_BOUND,
    Page,
    Reader,
    text,
)
from coordinator.state.records import DeviceRecord, DeviceState, HostRecord
from coordinator.state.wait_reasons import HostFlag


@dataclass(frozen=True)
class HostEntry:
    host: HostRecord
    draining: bool
    static_revoked: bool  # a static host's configured credential is revoked
    # By its last heartbeat, as the scripts read it (lua/readHostFlags); a revoked host's
    # credential is the caller's to judge.
    online: bool


class FleetReads(Reader):
    """The device and host reads of `Queries`."""

    async def devices(self, ids: list[str]) -> list[DeviceState]:
        """The pooled ones of these devices, in the given order."""
        if not ids:
            return []
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.hmget(k.devices, ids)
            pipe.hmget(k.reservations, ids)
            pipe.hmget(k.disabled_devices, ids)
            pipe.hmget(k.enrolled_devices, ids)
            raw_devices, reservations, disabled, enrolled = await pipe.execute()
        records = [
            (DeviceRecord.from_json(d, raw), reserved, off, enrollment)
            for d, raw, reserved, off, enrollment in zip(ids, raw_devices, reservations, disabled, enrolled,
                                                         strict=True)
            if raw is not None
        ]
        flags = await self.host_flags(sorted({r[0].host_id for r in records}))
        return [
            DeviceState(
                record,
                reserved_by=None if reserved is None else text(reserved),
                disabled=None if off is None else orjson.loads(off),
                host_online=HostFlag.ONLINE in flags[record.host_id],
                host_draining=HostFlag.DRAINING in flags[record.host_id],
                host_stalled=HostFlag.STALLED in flags[record.host_id],
                local_id=None if enrollment is None else orjson.loads(enrollment).get("local_id"),
            )
            for record, reserved, off, enrollment in records
        ]

    async def list_devices(self, *, host_id: str | None, driver: str | None, status: str | None,
                           limit: int, cursor: str | None) -> Page:
        """Ordered by driver, then device id; the cursor is "driver/device id" of the last device
        examined. A host's devices come from its snapshot (at most a host's device limit); the
        status filter examines at most SCAN_BOUND devices per page."""
        if host_id is not None:
            members = await self._host_device_members(host_id, driver, cursor)
            states = [s for s in await self.devices([m[1] for m in members]) if s.device.host_id == host_id]
            chosen = [s for s in states if status is None or s.device.status == status]
            more = len(chosen) > limit
            chosen = chosen[:limit]
            return Page(chosen, _device_cursor(chosen[-1]) if more else None)

        low = f"({cursor.replace('/', chr(0), 1)}" if cursor else (f"[{driver}\0" if driver else "-")
        high = f"({driver}\1" if driver else "+"
        found: list[DeviceState] = []
        examined = 0
        last: str | None = None
        while len(found) < limit and examined < SCAN_BOUND:
            count = BATCH if status else limit - len(found)
            batch = [text(m) for m in await self.redis.zrangebylex(
                self.keys.devices_by_driver, low, high, start=0, num=count)]
            by_id = {s.device.device_id: s for s in await self.devices([m.split("\0", 1)[1] for m in batch])}
            for member in batch:
                examined += 1
                last = member
                state = by_id.get(member.split("\0", 1)[1])
                if state is not None and (status is None or state.device.status == status):
                    found.append(state)
                    if len(found) == limit:
                        break
            if len(batch) < count and len(found) < limit:
                return Page(found, None)  # the index is exhausted
            low = f"({last}"
        return Page(found, None if last is None else last.replace("\0", "/", 1))

    async def _host_device_members(self, host_id: str, driver: str | None,
                                   cursor: str | None) -> list[tuple[str, str]]:
        raw = await self.redis.hget(self.keys.host_snapshots, host_id)
        if raw is None:
            return []
        members = sorted((d["driver"], d["device_id"]) for d in orjson.loads(raw)["devices"])
        after = tuple(cursor.split("/", 1)) if cursor else None
        return [m for m in members if (driver is None or m[0] == driver) and (after is None or m > after)]

    async def device_runs(self, device_id: str, limit: int) -> list[dict[str, Any]]:
        """The device's runs, newest first: the one in progress (its reserved task, while
        running), then the ended ones the scripts recorded."""
        async with self._pipeline() as pipe:
            pipe.hget(self.keys.reservations, device_id)
            pipe.lrange(self.keys.device_runs(device_id), 0, limit - 1)
            holder, ended = await pipe.execute()
        runs = [orjson.loads(r) for r in ended]
        current = holder and await self.get_task(text(holder))
        if current and current.status == wire.TaskStatus.RUNNING and current.device_id == device_id:
            runs.insert(0, {"task_id": current.id, "attempt": current.attempt, "host_id": current.host_id,
                            "started_at": current.started_at})
        return runs[:limit]

    async def device_known(self, device_id: str) -> bool:
        """Pooled, enrolled, or with runs on record."""
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.hexists(k.devices, device_id)
            pipe.hexists(k.enrolled_devices, device_id)
            pipe.exists(k.device_runs(device_id))
            return any(await pipe.execute())

    # -- hosts -----------------------------------------------------------------------------

    async def hosts(self, host_ids: list[str], static_digests: dict[str, str]) -> list[HostEntry]:
        """These hosts, in the given order (a host with no record is still answered: a static
        host configured but never seen). ``static_digests``: configured token digests."""
        if not host_ids:
            return []
        k = self.keys
        digests = [static_digests[h] for h in host_ids if h in static_digests]
        async with self._pipeline() as pipe:
            pipe.hmget(k.hosts, host_ids)
            pipe.zmscore(k.host_seen, host_ids)
            pipe.hmget(k.host_snapshots, host_ids)
            if digests:
                pipe.smismember(k.revoked_tokens, digests)
            replies, flags = await asyncio.gather(pipe.execute(), self.host_flags(host_ids))
        records, seen, snapshots = replies[:3]
        revoked = dict(zip(digests, replies[3], strict=True)) if digests else {}
        return [
            HostEntry(
                HostRecord.from_parts(h, records[i], snapshots[i], seen[i]),
                draining=HostFlag.DRAINING in flags[h],
                static_revoked=bool(revoked.get(static_digests.get(h, ""), False)),
                online=HostFlag.ONLINE in flags[h],
            )
            for i, h in enumerate(host_ids)
        ]

    async def workflows(self) -> list[dict[str, Any]]:
        """What the fleet can run now: each workflow some online host lists, by name, with those
        hosts (ids, sorted) and how many pooled devices they have between them. A host that
        lists nothing (an agent older than capabilities) runs anything but names nothing, so it
        is in no entry. Reads every online host: bounded by the fleet's size."""
        k = self.keys
        members = cast("list[bytes]", await self.redis.zrange(k.hosts_online, 0, -1))  # ids, no scores
        swept_in = [text(h) for h in members]
        flags = await self.host_flags(swept_in)
        online = [h for h in swept_in if HostFlag.ONLINE in flags[h]]
        if not online:
            return []
        async with self._pipeline() as pipe:
            for host_id in online:
                pipe.hget(k.host_state(host_id), "capabilities")
                pipe.scard(k.host_devices(host_id))
            replies = await pipe.execute()
        capabilities, device_counts = replies[0::2], replies[1::2]
        hosts_of: dict[str, list[str]] = {}
        devices_of: dict[str, int] = {}
        for host_id, raw, count in zip(online, capabilities, device_counts, strict=True):
            if raw is None:
                continue
            for name in orjson.loads(raw).get("workflows", []):
                hosts_of.setdefault(name, []).append(host_id)
                devices_of[name] = devices_of.get(name, 0) + int(count)
        return [{"name": name, "hosts": sorted(hosts_of[name]), "devices": devices_of[name]}
                for name in sorted(hosts_of)]

    async def host_names(self, host_ids: list[str]) -> dict[str, str | None]:
        """What each host calls itself: its agent's latest word (the snapshot's
        ``agent.hostname``), else what it enrolled with; None when neither is known."""
        if not host_ids:
            return {}
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.hmget(k.hosts, host_ids)
            pipe.hmget(k.host_snapshots, host_ids)
            records, snapshots = await pipe.execute()
        names: dict[str, str | None] = {}
        for host_id, record, snapshot in zip(host_ids, records, snapshots, strict=True):
            host = HostRecord.from_parts(host_id, record, snapshot, None)
            names[host_id] = (host.snapshot.get("agent") or {}).get("hostname") or host.hostname or None
        return names

    async def device_local_ids(self, device_ids: list[str]) -> dict[str, str | None]:
        """The local id (an adb serial, an emulator's name) each managed host's device was
        enrolled with; None for a device no managed host enrolled (a static host's device id is
        its local id already)."""
        if not device_ids:
            return {}
        enrolled = await self.redis.hmget(self.keys.enrolled_devices, device_ids)
        return {device_id: None if raw is None else orjson.loads(raw).get("local_id")
                for device_id, raw in zip(device_ids, enrolled, strict=True)}

    async def host_exists(self, host_id: str) -> bool:
        return bool(await self.redis.hexists(self.keys.hosts, host_id))

    async def host_ids_page(self, static_ids: Iterable[str], limit: int, cursor: str | None) -> Page:
        """Host ids in order, after ``cursor``: every host with a record, and the configured
        static hosts never seen."""
        low = f"({cursor}" if cursor else "-"
        ids = [text(h) for h in await self.redis.zrangebylex(self.keys.host_ids, low, "+", start=0, num=limit + 1)]
        merged = sorted(set(ids) | {h for h in static_ids if cursor is None or h > cursor})
        # A static id beyond the last Redis id of this page belongs to a later page, unless Redis
        # has no more ids.
        if len(ids) > limit:
            merged = [h for h in merged if h <= ids[limit - 1]]
        page = merged[:limit]
        more = len(merged) > limit or len(ids) > limit
        return Page(page, page[-1] if more and page else None)


def _device_cursor(state: DeviceState) -> str:
    return f"{state.device.driver}/{state.device.device_id}"
