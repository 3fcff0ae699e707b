"""The clock every script reads: Redis ``TIME`` (one clock for every coordinator process), plus an
offset that only tests move.

Deadlines (leases, offline hosts, claim and queue timeouts, retention) are all read against this
one clock, so a test that holds a ``ShiftedClock`` and hands it to its ``Store`` and ``Queries``
can step across any deadline at once, and land a call between a deadline and the sweep that acts
on it, without sleeping. The service's own stays at 0: ``Store`` and ``Queries`` hold one
whether or not a test gave them theirs.
"""

from __future__ import annotations


class ShiftedClock:
    """Redis time moved forward by ``offset_ms``; never moves back, as Redis time does not."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("the clock only moves forward")
        self.offset_ms += ms

