"""The reaper: acts on every deadline that has passed.

- leases past their deadline: requeued as the next attempt, or failed / cancelled;
- hosts silent past the offline threshold: offline, their unclaimed assignments requeued;
- assignments not claimed within the claim timeout: requeued, their host stalled until it polls;
- queued tasks past their queue deadline: failed with ``queue_timeout``;
- live sessions past their idle timeout or max duration: asked to end (their agents report);
- what a step left past its bounds (lua/placeLeftOver): devices it could not feed, and teams
  whose placement stopped at its slice, placed on a slice a call;
- terminal tasks past their retention: deleted, with everything hanging off them (their
  artifacts' blobs deleted from the blob store after the script: coordinator/blobs/artifacts.py);
- entries of an earlier Redis layout that a process of the earlier version may still write:
  rewritten in the current one (coordinator/state/upgrades.py; a pass with none left costs one
  read).

It runs in every coordinator process. Each sweep is one script that finds due work through a
deadline index (no KEYS or SCAN) and takes at most a batch per call, removing each deadline in
the step that acts on it; so two processes sweeping at once is safe, no leader election is
needed, and a sweep never blocks Redis for long. While no coordinator runs, nothing expires;
the first sweep after a restart acts on everything that fell due meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable

from coordinator.blobs.artifacts import Artifacts
from coordinator.cancellation import cancelling
from coordinator.outage import OutageLog
from coordinator.state.store import Store, Sweep
from coordinator.state.upgrades import UPGRADES

log = logging.getLogger("coordinator.reaper")

BATCH = 200


async def _drain(call: Callable[[int], Awaitable[int | Sweep]]) -> int:
    """Call a sweep until a call takes less than a full batch; what it acted on in all."""
    total = 0
    while True:
        reply = await call(BATCH)
        taken, acted = (reply.taken, reply.acted) if isinstance(reply, Sweep) else (reply, reply)
        total += acted
        if taken < BATCH:
            return total


async def sweep(store: Store, artifacts: Artifacts) -> dict[str, int]:
    """One full sweep; how many of each kind it acted on."""
    return {
        # First: until it has run, a host drained on an earlier layout could take work.
        "upgraded_hosts": await _upgrade(store, "upgraded_hosts"),
        "leases": await _drain(store.expire_leases),
        "hosts": await _drain(store.expire_hosts),
        "claims": await _drain(store.expire_assignments),
        "queued": await _drain(store.expire_queued),
        "sessions": await _drain(store.end_idle_sessions),
        # A step feeds a bounded number of devices and places a bounded slice of a team back under
        # its quota; the rest is placed here.
        "placed_left_over": await store.place_left_over(),
        "purged": await artifacts.purge(store),
        "upgraded": await _upgrade(store, "upgraded"),
    }


async def _upgrade(store: Store, counted_as: str) -> int:
    """The upgrade a pass runs and counts as ``counted_as`` (coordinator/state/upgrades.py)."""
    [upgrade] = [u for u in UPGRADES if u.every_sweep == counted_as]
    return await _drain(functools.partial(upgrade.call, store))


async def upgrade_before_serving(store: Store) -> int:
    """The upgrades that walk a collection once (coordinator/state/upgrades.py), finished as the
    process starts, before it serves: how many entries they acted on. The others run on every
    pass, the first as the reaper starts."""
    return sum([await _drain(functools.partial(upgrade.call, store)) for upgrade in UPGRADES
                if upgrade.every_sweep is None])


async def run_reaper(store: Store, artifacts: Artifacts, interval_s: float,
                     outage: OutageLog | None = None) -> None:
    """Sweep every ``interval_s`` (jittered) until cancelled, the first one interval after the
    start, not at once: a coordinator driven step by step with a long interval (the in-process
    tests) sweeps only when asked, and processes started together do not sweep in step.
    Failures go to ``outage`` (the process's, shared with its requests: a sweep that works ends
    an outage they noticed)."""
    outage = outage if outage is not None else OutageLog(log, "reaper")
    while True:
        # Jitter keeps several processes from sweeping in lock-step.
        await asyncio.sleep(interval_s * random.uniform(0.5, 1.0))
        try:
            await sweep(store, artifacts)
            outage.succeeded()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - keep sweeping through Redis hiccups
            if cancelling():
                raise asyncio.CancelledError from None
            outage.failed(exc)
        if cancelling():
            raise asyncio.CancelledError
