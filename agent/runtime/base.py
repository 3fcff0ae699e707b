"""The small contracts shared by the agent and its execution runtime.

The agent (``agent/``) only ever talks to the runtime through these types: it builds a
``DeviceManager`` from ``DeviceSpec``s, picks a runner for an assignment and hands it a
``RunControl`` through which the runner publishes ``Progress`` and learns that it must stop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

OutcomeStatus = Literal["succeeded", "failed", "cancelled"]


@dataclass(frozen=True)
class DeviceSpec:
    """One entry of ``HOST_AGENT_DEVICES``: ``sim:phone-1`` or ``adb:*`` / ``adb:SERIAL``."""

    driver: str
    local_id: str


@dataclass(frozen=True)
class Progress:
    """What a runner publishes after every step: bounded, and never a screenshot or a UI dump."""

    step_index: int
    status: str  # "running", "succeeded", "failed"
    summary: str  # short plain text


@dataclass(frozen=True)
class Outcome:
    status: OutcomeStatus
    failure_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class RunControl:
    """Passed to a runner for one run: a place to publish progress and a stop signal.

    ``stop(reason)`` is called by the agent (lease lost, cancel requested, shutdown). Runners
    check ``stopped`` between steps and use ``sleep`` for waits, so a stop interrupts a wait.
    """

    def __init__(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        self._on_progress = on_progress
        self._stopped = asyncio.Event()
        self.stop_reason: str | None = None
        self.latest: Progress | None = None

    def publish(self, progress: Progress) -> None:
        self.latest = progress
        if self._on_progress is not None:
            self._on_progress(progress)

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True if the run was stopped meanwhile."""
        try:
            await asyncio.wait_for(self._stopped.wait(), timeout=max(0.0, seconds))
        except asyncio.TimeoutError:
            return False
        return True
