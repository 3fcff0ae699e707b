"""Two agents heartbeating as one host: noticed, named in the host's record and logged.

Two agents started with the same static host id overwrite each other's device snapshots at every
heartbeat; their tasks then fail ``device_gone`` for no visible reason (issue 42, seen 6). Each
agent process sends an ``instance_id`` of its own in its heartbeat's ``agent``. Two instances are
both alive when they alternate: instance A heartbeats again after instance B has heartbeated
since A's previous one, all within ``window_s`` (the time after which a silent host is offline).
An agent restarted in place is one instance replaced by another, never alternating, and is no
conflict.

Process-local on purpose: it only observes heartbeats, never decides anything, and the record it
leads to is written by the heartbeat's own atomic step (the ``agent`` object stored with the
snapshot carries ``conflicting_agent``). With several coordinator processes each notices from the
heartbeats it serves, which two alternating agents spread over all of them. Bounded: at most
``max_hosts`` hosts remembered (least recently heard of forgotten first), a few instances each.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from wire import iso_ms

log = logging.getLogger("coordinator.hosts")

_INSTANCES_PER_HOST = 4


@dataclass(frozen=True)
class Instance:
    instance_id: str
    hostname: str | None
    seen_at: float  # the clock's seconds
    seen_at_wall_ms: int  # when, for people

    def describe(self) -> dict[str, object]:
        """As the host's record names it (``conflicting_agent``)."""
        return {"instance_id": self.instance_id, "hostname": self.hostname, "last_seen": iso_ms(self.seen_at_wall_ms)}


class AgentInstances:
    """``saw(host_id, instance_id, hostname)`` on each heartbeat: the other live instance of that
    host, if two alternate, else None. ``clock`` is monotonic seconds (a test's own)."""

    def __init__(self, window_s: float, *, max_hosts: int = 100_000,
                 clock: Callable[[], float] = time.monotonic, wall_ms: Callable[[], int] | None = None) -> None:
        self._window_s = window_s
        self._max_hosts = max_hosts
        self._clock = clock
        self._wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self._hosts: OrderedDict[str, dict[str, Instance]] = OrderedDict()
        self._logged_at: dict[str, float] = {}  # host id -> when its conflict was last logged

    def saw(self, host_id: str, instance_id: str, hostname: str | None) -> Instance | None:
        now = self._clock()
        instances = {i: seen for i, seen in self._hosts.pop(host_id, {}).items()
                     if now - seen.seen_at <= self._window_s}
        previous = instances.get(instance_id)
        # Another instance heard from since this one's previous heartbeat: both are alive.
        other = None if previous is None else max(
            (seen for i, seen in instances.items() if i != instance_id and seen.seen_at >= previous.seen_at),
            key=lambda seen: seen.seen_at, default=None)
        instances[instance_id] = Instance(instance_id, hostname, now, self._wall_ms())
        if len(instances) > _INSTANCES_PER_HOST:
            oldest = min(instances.values(), key=lambda seen: seen.seen_at)
            del instances[oldest.instance_id]
        self._hosts[host_id] = instances
        while len(self._hosts) > self._max_hosts:
            forgotten, _ = self._hosts.popitem(last=False)
            self._logged_at.pop(forgotten, None)
        if other is not None:
            self._log_once(host_id, instances[instance_id], other, now)
        return other

    def _log_once(self, host_id: str, this: Instance, other: Instance, now: float) -> None:
        """One line per conflict and window, not one per heartbeat."""
        logged = self._logged_at.get(host_id)
        if logged is not None and now - logged <= self._window_s:
            return
        self._logged_at[host_id] = now
        log.warning("two agents heartbeat as host %s: instance %s (hostname %s) and instance %s (hostname %s); "
                    "each heartbeat replaces the other's devices, so their tasks fail device_gone: stop one, "
                    "or give each a host id of its own", host_id, this.instance_id, this.hostname or "?",
                    other.instance_id, other.hostname or "?")
