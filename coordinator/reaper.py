"""The lease reaper: ends expired leases and takes silent hosts offline.

It runs in every coordinator process. Its scripts find due work through deadline indexes (no
KEYS or SCAN) and are atomic and idempotent, so two processes sweeping at once is safe and no
leader election is needed.
"""

from __future__ import annotations

import asyncio
import logging
import random

from coordinator.cancellation import cancelling
from coordinator.metrics import Metrics
from coordinator.store import Store

log = logging.getLogger("coordinator.reaper")

_BATCH = 200


async def sweep(store: Store, metrics: Metrics | None = None) -> tuple[int, int]:
    """One full sweep; returns (leases ended, hosts taken offline)."""
    leases = hosts = 0
    while True:
        ended = await store.expire_leases(_BATCH)
        leases += ended
        if ended < _BATCH:
            break
    while True:
        gone = await store.expire_hosts(_BATCH)
        hosts += gone
        if gone < _BATCH:
            break
    if metrics is not None and leases:
        metrics.lease_expiries.inc(leases)
    return leases, hosts



async def run_reaper(store: Store, interval_s: float, metrics: Metrics | None = None) -> None:
    while True:
        try:
            await sweep(store, metrics)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - keep sweeping through Redis hiccups
            if cancelling():
                raise asyncio.CancelledError from None
            log.exception("reaper sweep failed")
        if cancelling():
            raise asyncio.CancelledError
        # Jitter keeps several processes from sweeping in lock-step.
        await asyncio.sleep(interval_s * random.uniform(0.5, 1.0))
