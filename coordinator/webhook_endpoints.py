"""What webhook delivery (``coordinator/webhooks.py``) keeps of each endpoint: the policy it
delivers by (the COORDINATOR_WEBHOOK_* settings), an endpoint's circuit and its attempt slots in
this process."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from coordinator.settings import Settings
from coordinator.webhook_targets import TargetPolicy


@dataclass(frozen=True)
class DeliveryPolicy:
    """The delivery's tunables (the COORDINATOR_WEBHOOK_* settings), in seconds."""

    attempt_timeout_s: float = 10.0
    visibility_s: float = 60.0
    concurrency: int = 32
    endpoint_concurrency: int = 4
    retry_base_s: float = 1.0
    retry_max_delay_s: float = 3600.0
    retry_for_s: float = 86400.0
    poll_interval_s: float = 0.5
    circuit_timeouts: int = 3
    circuit_open_s: float = 30.0
    # An attempt unanswered this long gives its process slot back (it keeps its endpoint's).
    slow_after_s: float = 0.1
    targets: TargetPolicy = field(default_factory=TargetPolicy)

    @classmethod
    def of(cls, settings: Settings) -> DeliveryPolicy:
        return cls(settings.webhook_attempt_timeout_s, settings.webhook_visibility_s, settings.webhook_concurrency,
                   settings.webhook_endpoint_concurrency, settings.webhook_retry_base_s,
                   settings.webhook_retry_max_delay_s, settings.webhook_retry_for_s, settings.webhook_poll_interval_s,
                   settings.webhook_circuit_timeouts, settings.webhook_circuit_open_s,
                   targets=settings.webhook_targets)

    def retry_delay_s(self, attempts: int, rng: random.Random) -> float:
        """The wait before the next attempt once ``attempts`` were made: doubling from the base,
        at most the max, then jittered down by up to half, so a fleet's retries spread out."""
        delay: float = min(self.retry_max_delay_s, self.retry_base_s * 2.0 ** min(attempts - 1, 40))
        return delay * rng.uniform(0.5, 1.0)


class Circuit:
    """One endpoint's circuit in this process. Closed: attempts go. Open (after
    ``circuit_timeouts`` timeouts in a row): its deliveries are deferred, no attempt made, until
    ``open_until``. Then half-open: the next attempt is the probe, the others wait for it."""

    def __init__(self) -> None:
        self.timeouts = 0  # in a row
        self.opened = 0  # times opened in a row: each opening lasts twice the one before
        self.open_until = 0.0  # monotonic
        self.probing = False

    def open_for_s(self, now: float) -> float:
        """How long it stays open (0 when it is not open)."""
        return max(0.0, self.open_until - now)

    def admit(self, now: float, policy: DeliveryPolicy) -> tuple[float, bool]:
        """(0, whether it is the probe) when an attempt may start now; else (how long until one
        may, False)."""
        if now < self.open_until:
            return self.open_until - now, False
        if not self.opened:
            return 0.0, False
        if self.probing:
            return policy.attempt_timeout_s, False
        self.probing = True
        return 0.0, True

    def ended(self, timed_out: bool | None, probe: bool, now: float, policy: DeliveryPolicy) -> float:
        """An attempt ended (``timed_out`` None: it was cut short, and tells nothing). How long
        the circuit opens for now, 0 when it does not."""
        if probe:
            self.probing = False
        if timed_out is None:
            return 0.0
        if not timed_out:  # an answer, whatever it was: the endpoint is there
            self.timeouts = self.opened = 0
            self.open_until = 0.0
            return 0.0
        if self.opened and not probe:
            return 0.0  # an attempt from before the circuit opened: it knows already
        self.timeouts += 1
        if not probe and self.timeouts < policy.circuit_timeouts:
            return 0.0
        self.timeouts = 0
        self.opened += 1
        open_s = min(policy.retry_max_delay_s, policy.circuit_open_s * 2.0 ** min(self.opened - 1, 30))
        self.open_until = now + open_s
        return open_s

    @property
    def idle(self) -> bool:
        """Nothing worth keeping: closed, with no timeout counted."""
        return not (self.timeouts or self.opened or self.probing)


class Endpoint:
    """One webhook's share of this process: its attempt slots, who waits for one, and since when
    its oldest attempt in flight has run (how slow it is now)."""

    def __init__(self, slots: int) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.assigned = 0  # deliveries attempted or waiting for a slot
        self.started: dict[int, float] = {}  # attempt -> its start (monotonic)

    def slowness_s(self) -> float:
        """How long its oldest attempt in flight has run (0 with none)."""
        return time.monotonic() - min(self.started.values()) if self.started else 0.0
