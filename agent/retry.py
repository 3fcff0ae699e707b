"""Backoff for every retry the agent makes: exponential, capped, with full jitter.

Full jitter (a uniform draw between 0 and the capped exponential) keeps a fleet of hosts that
lost the coordinator at the same moment from coming back in lock-step. ``retry_transient`` is the
one retry loop for "same request again until the coordinator answers"; the loops in
``agent/lease_run.py`` that must also watch a deadline (lease renewal) use ``Backoff`` directly.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agent.client import TransientError

T = TypeVar("T")

log = logging.getLogger("agent.retry")


class Backoff:
    """``next_delay()`` → uniform(0, min(cap, base * 2**n)) for the n-th consecutive failure."""

    def __init__(
        self, base_s: float = 0.5, cap_s: float = 30.0, rng: Callable[[], float] = random.random
    ) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self._rng = rng
        self._failures = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap_s, self.base_s * (2 ** min(self._failures, 32)))
        self._failures += 1
        return ceiling * self._rng()

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures


async def retry_transient(
    call: Callable[[], Awaitable[T]], backoff: Backoff, *, what: str
) -> T:
    """Repeat ``call`` (the identical request) after each ``TransientError`` until it returns
    or raises anything else. Cancellation is the only other way out."""
    while True:
        try:
            result = await call()
        except TransientError as exc:
            delay = backoff.next_delay()
            log.warning("%s failed (%s); retry %d in %.2fs", what, exc, backoff.failures, delay)
            await asyncio.sleep(delay)
        else:
            backoff.reset()
            return result
