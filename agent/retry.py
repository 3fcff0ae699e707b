"""Every retry the agent makes: one policy, one backoff, one loop.

``RetryPolicy`` is the configuration (base, cap, random source), built once at start-up and
handed to whatever retries. ``Backoff`` is the state of one run of failures: exponential,
capped, with full jitter — a uniform draw between 0 and the capped exponential — so a fleet of
hosts that lost the coordinator at the same moment does not come back in lock-step.

``retry`` is the one loop for "send the identical request again until the coordinator
answers". Each caller says what is worth repeating (``retry_on``), what ends the loop at once
even so (``stop_on``; everything else ends it too, by propagating) and how to wait (``sleep``:
a heartbeat waits on its own schedule, a lease renewal never past the lease). The caller
decides what "identical" means by what its ``call`` closes over: the claim loop's keeps its
``claim_id``, the result report its body, the renewal re-reads the latest progress.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from agent.answers import TransientError

T = TypeVar("T")
ExceptionTypes = type[Exception] | tuple[type[Exception], ...]

log = logging.getLogger("agent.retry")


@dataclass(frozen=True)
class RetryPolicy:
    """How every retry loop backs off; ``rng`` is injectable so tests can pin the jitter."""

    base_s: float = 0.5
    cap_s: float = 30.0
    rng: Callable[[], float] = random.random

    def backoff(self, *, base_s: float | None = None, cap_s: float | None = None) -> Backoff:
        """A fresh run of failures under this policy, optionally tighter (a lease renewal's
        retries must fit inside the lease, a heartbeat's inside its interval)."""
        policy = replace(
            self,
            base_s=self.base_s if base_s is None else base_s,
            cap_s=self.cap_s if cap_s is None else cap_s,
        )
        return Backoff(policy)


class Backoff:
    """``next_delay()`` → uniform(0, min(cap, base * 2**n)) for the n-th consecutive failure.

    ``policy`` may be replaced between failures (the heartbeat's cap follows its interval);
    the count of failures carries on.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self._failures = 0

    def next_delay(self) -> float:
        ceiling: float = min(self.policy.cap_s, self.policy.base_s * (2 ** min(self._failures, 32)))
        self._failures += 1
        return ceiling * self.policy.rng()

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures


async def retry(
    call: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    what: str,
    retry_on: ExceptionTypes = TransientError,
    stop_on: ExceptionTypes = (),
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Await ``call()`` until it returns; after an exception of ``retry_on`` that is not one of
    ``stop_on``, wait ``backoff.next_delay()`` (through ``sleep``) and call again. Any other
    exception propagates, as does cancellation. A success resets ``backoff``; a failure that
    propagates does not, so a caller sharing one ``Backoff`` across calls keeps backing off."""
    while True:
        try:
            result = await call()
        except retry_on as exc:
            if isinstance(exc, stop_on):
                raise
            delay = backoff.next_delay()
            log.warning("%s failed (%s); retry %d in %.2fs", what, exc, backoff.failures, delay)
            await sleep(delay)
        else:
            backoff.reset()
            return result
