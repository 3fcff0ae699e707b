"""The small contracts shared by the agent and its execution runtime.

The agent (``agent/``) only ever talks to the runtime through these types: it builds a
``DeviceManager`` from ``DeviceSpec``s, reads its devices as ``DeviceRecord``s, hands an
assignment to an ``Executor`` with a ``RunControl`` through which the runner publishes
``Progress`` and learns that it must stop, and gets an ``Outcome`` back. They live here, below
both the protocol loops (``agent/host.py``, ``agent/lease_run.py``) and the runtime, so neither
side imports the other to name them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wire import ResultStatus

if TYPE_CHECKING:  # only named in hints: the runtime does not need the HTTP client to run
    from agent.answers import Assignment

    from .driver import Driver


@dataclass(frozen=True)
class DeviceSpec:
    """One entry of ``HOST_AGENT_DEVICES``: ``sim:phone-1`` or ``adb:*`` / ``adb:SERIAL``."""

    driver: str
    local_id: str


@dataclass(frozen=True, kw_only=True)
class DeviceRecord:
    """One local device as the agent sees it, from its driver to enrollment and the heartbeat.

    ``device_id`` is the cloud id (what heartbeats report and assignments name); it is ``None``
    while the device is not enrolled yet (start-up, or a phone plugged in later). ``online``:
    the driver can reach the device now; ``False`` is reported ``unavailable``. Keyword-only,
    because ``driver`` and ``local_id`` are both short strings and easy to swap by position.
    """

    driver: str
    local_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    device_id: str | None = None
    online: bool = True


@dataclass(frozen=True)
class Progress:
    """What a runner publishes after every step: bounded, and never a screenshot or a UI dump."""

    step_index: int
    status: str  # "running", "succeeded", "failed"
    summary: str  # short plain text


# Failure reasons of runs that ended through no fault of their task: another attempt, on this
# device later or on another one, may well succeed, so they are reported ``retryable``.
SHUTDOWN = "shutdown"  # the agent shut down (SIGTERM) before the run finished
DEVICE_GONE = "device_gone"  # this host no longer has the device (not found, dropped)
DEVICE_UNAVAILABLE = "device_unavailable"  # held, but its driver cannot reach it (unplugged, offline)
# A failed run's result names its last steps (``RunControl.last_steps``), so its report can say
# what led to the failure.
LAST_STEPS_KEPT = 5
DEVICE_LOST = "device_lost"  # adb lost the device during a command (not found, offline, closed)


@dataclass(frozen=True)
class Outcome:
    """How a run ended. ``retryable`` (only ever on ``failed``) tells the coordinator that the
    device or the host, not the task, was at fault: it requeues the task while attempts remain."""

    status: ResultStatus
    failure_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    retryable: bool = False

    def __post_init__(self) -> None:
        # A plain "failed" is accepted and stored as the member, so every outcome carries one
        # of the statuses a host may report, whoever built it.
        object.__setattr__(self, "status", ResultStatus(self.status))
        if self.retryable and self.status != ResultStatus.FAILED:
            raise ValueError("only a failed outcome can be retryable")

    @classmethod
    def retryable_failure(cls, failure_reason: str, metadata: dict[str, Any] | None = None) -> Outcome:
        """A ``failed`` outcome the coordinator may run again as a new attempt."""
        return cls(ResultStatus.FAILED, failure_reason, dict(metadata or {}), retryable=True)


class RunEvidence(Protocol):
    """Where a run's screens go (the agent's ``agent/artifacts.py``). Neither method raises nor
    waits for an upload: a screen is taken (bounded in time) and queued, or let go."""

    async def after_step(self, step_index: int, driver: Driver) -> None:
        """A device step has ended (succeeded or failed): its screen, if screens are wanted."""
        ...

    async def after_run(self, outcome: Outcome, driver: Driver) -> None:
        """The run has ended as ``outcome``: the final screen of a failed run."""
        ...


class RunControl:
    """Passed to a runner for one run: a place to publish progress and a stop signal.

    ``stop(reason)`` is called by the agent (lease lost, cancel requested, shutdown). Runners
    check ``stopped`` between steps and use ``sleep`` for waits, so a stop interrupts a wait.
    Runners call ``after_step`` when a device step ends, the executor ``after_run`` when the run
    has; both go to ``evidence`` when there is one (the screens of the run), else do nothing.
    """

    def __init__(self, on_progress: Callable[[Progress], None] | None = None,
                 evidence: RunEvidence | None = None) -> None:
        self._on_progress = on_progress
        self._evidence = evidence
        self._stopped = asyncio.Event()
        self.stop_reason: str | None = None
        self.latest: Progress | None = None
        self._recent: deque[Progress] = deque(maxlen=LAST_STEPS_KEPT)

    def publish(self, progress: Progress) -> None:
        self.latest = progress
        if self._recent and self._recent[-1].step_index == progress.step_index:
            self._recent[-1] = progress  # the same step, now further on (running, then its end)
        else:
            self._recent.append(progress)
        if self._on_progress is not None:
            self._on_progress(progress)

    @property
    def last_steps(self) -> list[Progress]:
        """The last ``LAST_STEPS_KEPT`` steps published, oldest first, each as it last stood."""
        return list(self._recent)

    async def after_step(self, step_index: int, driver: Driver) -> None:
        if self._evidence is not None:
            await self._evidence.after_step(step_index, driver)

    async def after_run(self, outcome: Outcome, driver: Driver) -> None:
        if self._evidence is not None:
            await self._evidence.after_run(outcome, driver)

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
        except TimeoutError:
            return False
        return True


class Executor(Protocol):
    """The seam between the protocol loops and the runtime (see ``agent/executor.py``)."""

    def devices(self) -> list[DeviceRecord]:
        """The enrolled devices (``device_id`` set), as the heartbeat reports them."""
        ...

    async def refresh(self) -> None:
        """Bring ``devices()`` up to date (reachability, devices found or gone). Raises
        ``Unauthorized`` when the host credential is gone."""
        ...

    async def run(self, assignment: Assignment, control: RunControl) -> Outcome:
        """Run one assignment to an ``Outcome``; honour ``control.stopped`` between steps.
        Raises ``DeviceNotFound`` when this host does not have the device it names."""
        ...

    def capabilities(self) -> dict[str, Any]:
        """What this host can run, as the heartbeat reports it (``agent.capabilities``):
        ``{"workflows": [names], "planners": [names], "sessions": true}``."""
        ...

    def driver_for(self, device_id: str) -> Driver:
        """The driver of a bound device, for a live session's commands (``agent/session_run.py``).
        Raises ``DeviceNotFound`` when this host does not have the device."""
        ...

    async def reenroll(self) -> dict[str, str]:
        """Enroll the bound devices again (managed hosts: the coordinator forgot one of them),
        persist and bind the cloud ids it answers; return ``{local id: new cloud id}`` for the
        devices whose id changed. Raises the client's errors (``TransientError``,
        ``Unauthorized``, ``Rejected``, ``MalformedAnswer``)."""
        ...
