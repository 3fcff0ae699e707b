"""How the coordinator lives through Redis failures that it retries (the reaper's sweeps, the
wake-up inbox, the feed's reader) or answers ``503 unavailable`` (requests).

``OutageLog``: an outage is two lines, one as it begins and one as it ends with its length,
instead of a traceback every time a loop retries or a line for every request; a traceback only
for an error that is not Redis being unavailable (``errors.redis_unavailable``: unreachable,
loading, failing over, or busy running another client's script).

``Backoff``: how long a loop that calls Redis back to back (the wake-up inbox, the feed's
reader) waits after a failure before it tries again. The loops on a timer (the reaper, webhook
delivery) keep their interval, which is already short.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from coordinator.errors import redis_busy, redis_unavailable

# The longest wait between two attempts, so a loop is back within about this long of Redis
# answering again (the wake-up inbox's polls wait on it). A try at a Redis that is down costs
# Redis nothing (a refused connect); the jitter keeps a deployment's processes from coming back
# in step.
RETRY_CAP_S = 1.0


class Backoff:
    """The waits of one loop between its failed calls of Redis: the n-th failure in a row waits a
    uniform draw up to ``first_s`` * 2**(n-1), at most ``cap_s`` (full jitter)."""

    def __init__(self, first_s: float = 0.1, cap_s: float = RETRY_CAP_S,
                 rng: Callable[[], float] = random.random) -> None:
        self._first_s = first_s
        self._cap_s = cap_s
        self._rng = rng
        self._failures = 0

    def next_delay(self) -> float:
        """The wait after one more failure."""
        ceiling = min(self._cap_s, self._first_s * 2.0 ** min(self._failures, 32))
        self._failures += 1
        return ceiling * self._rng()

    def reset(self) -> None:
        """A call worked: the next failure starts from ``first_s`` again."""
        self._failures = 0


class OutageLog:
    """The outage state of one loop: call ``succeeded`` after each call of Redis that worked and
    ``failed`` with each exception. Each loop has its own (they fail and recover at different
    moments, and each line names its loop); requests share the reaper's, which says when Redis
    answers again since it calls it every interval."""

    def __init__(self, logger: logging.Logger, loop: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._loop = loop
        self._clock = clock
        self._since: float | None = None  # when the ongoing outage began, on ``clock``
        self._failures = 0  # calls failed since

    def failed(self, exc: BaseException) -> None:
        """Redis unavailable: the first failure of an outage is logged, the rest are not.
        Anything else is unexpected, logged with its traceback each time; it neither begins nor
        ends an outage (only a call that worked ends one)."""
        if redis_unavailable(exc):
            self._failures += 1
            if self._since is None:
                self._since = self._clock()
                self._failures = 1
                # redis-py's messages name the host and port, never a password.
                self._log.warning("%s: Redis %s (%s: %s); retrying until it answers", self._loop,
                                  "busy with another client's script" if redis_busy(exc) else "unreachable",
                                  type(exc).__name__, " ".join(str(exc).split()))
            return
        self._log.error("%s failed unexpectedly", self._loop, exc_info=exc)

    def succeeded(self) -> None:
        """Redis answered: the end of the outage, if one was ongoing, is logged with its length."""
        if self._since is not None:
            lasted = self._clock() - self._since
            self._since = None
            self._log.info("%s: Redis reachable again after %.1f s (%d failed calls meanwhile)",
                           self._loop, lasted, self._failures)
