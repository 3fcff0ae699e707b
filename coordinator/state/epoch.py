"""Noticing that Redis lost its data, so that what a process keeps in memory never outlives it.

A process keeps two things it read from Redis: enrolled hosts' credentials (``auth.py``) and
whether the script library is loaded (``scripts.py``). Both are only true of the data they were
read from. The deployment's ``epoch`` key holds a random value written once, by whichever process
finds it missing (``SET NX``); every process remembers the value it saw. A Redis restarted
without its data, flushed, or a replica promoted without it, has no epoch, or (once a process
wrote a new one) another: each process then drops what it keeps, before using it again.

When it is checked: before a cached credential is used, at most once per ``interval_s`` per
process (``confirm``). A cache hit costs a clock read; one request a second pays one ``GET``
(not pipelined with its script: the answer must come before the cache is trusted). Requests that
arrive while a check is under way wait for that one check. So a process trusts its caches at most
``interval_s`` after Redis last confirmed them, and in that window the scripts themselves refuse
an enrolled host whose record is gone (``lua/heartbeat-1.lua``, ``lua/enrollDevices-1.lua``).
A background loop would cost no request anything, but could not bound that window when the event
loop stalls; checking inside every script would mean a key and a comparison in each.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable

from redis.asyncio import Redis

log = logging.getLogger("coordinator.state.epoch")

# How long a process trusts its caches without asking Redis whether its data is still the same.
CHECK_INTERVAL_S = 1.0


class Epoch:
    """The deployment's epoch as this process last saw it, and what to drop when it changes."""

    def __init__(self, redis: Redis, key: str, *, interval_s: float = CHECK_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._key = key
        self._interval_s = interval_s
        self._clock = clock
        self._known: bytes | str | None = None
        self._checked_at = float("-inf")
        self._checking: asyncio.Future[None] | None = None
        self._on_change: list[Callable[[], None]] = []
        self.changes = 0  # times this process found its data gone: for logs and tests

    def on_change(self, drop: Callable[[], None]) -> None:
        """Call ``drop`` whenever the data this process has seen is found gone."""
        self._on_change.append(drop)

    async def confirm(self) -> None:
        """Make sure Redis confirmed the epoch within the last ``interval_s``."""
        if self._clock() - self._checked_at < self._interval_s:
            return
        if self._checking is None:
            self._checking = asyncio.ensure_future(self.check())
            self._checking.add_done_callback(self._checked)
        await asyncio.shield(self._checking)

    def _checked(self, future: asyncio.Future[None]) -> None:
        self._checking = None
        if not future.cancelled():
            future.exception()  # retrieved here; each waiter raises it

    async def check(self) -> None:
        """Read the epoch (writing one if it is missing); drop the caches if it is not the one
        this process saw. At start-up this records the first value seen and drops nothing."""
        current = await self._redis.get(self._key)
        if current is None:
            # NX: of the processes that find it missing, the first one's value is everyone's.
            await self._redis.set(self._key, secrets.token_hex(16), nx=True)
            current = await self._redis.get(self._key)
        self._checked_at = self._clock()
        if current == self._known:
            return
        first = self._known is None
        self._known = current
        if first:
            return
        self.changes += 1
        log.warning("Redis lost this deployment's data (its epoch changed): dropping cached "
                    "credentials and scripts")
        for drop in self._on_change:
            drop()
