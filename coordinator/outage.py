"""How the coordinator logs Redis failures that it retries (the reaper's sweeps, the wake-up
inbox, the feed's reader) or answers ``503 unavailable`` (requests): an outage is two lines, one
as it begins and one as it ends with its length, instead of a traceback every time a loop
retries or a line for every request; a traceback only for an error that is not Redis being
unavailable (``errors.REDIS_UNAVAILABLE``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from coordinator.errors import REDIS_UNAVAILABLE


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

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        """Redis unavailable: the first failure of an outage is logged, the rest are not.
        Anything else is unexpected, logged with its traceback each time; it neither begins nor
        ends an outage (only a call that worked ends one)."""
        if isinstance(exc, REDIS_UNAVAILABLE):
            self._failures += 1
            if self._since is None:
                self._since = self._clock()
                self._failures = 1
                # redis-py's messages name the host and port, never a password.
                self._log.warning("%s: Redis unreachable (%s: %s); retrying until it answers",
                                  self._loop, type(exc).__name__, " ".join(str(exc).split()))
            return
        self._log.error("%s failed unexpectedly", self._loop, exc_info=exc)

    def succeeded(self) -> None:
        """Redis answered: the end of the outage, if one was ongoing, is logged with its length."""
        if self._since is not None:
            lasted = self._clock() - self._since
            self._since = None
            self._log.info("%s: Redis reachable again after %.1f s (%d failed calls meanwhile)",
                           self._loop, lasted, self._failures)
