"""The host agent's loops, in one asyncio process, talking outbound only.

- heartbeat: every ``heartbeat_interval_s`` (and soon after a device turns busy or free) the
  complete device snapshot; a device holding an assignment reports ``busy``.
- claim: while at least one device is idle, exactly one long-poll is open. After a network
  error the poll is retried with the *same* ``claim_id``, so an assignment whose response was
  lost is handed back instead of orphaned; a new ``claim_id`` is used only once an answer came.
- one run per claimed assignment: waits for its device to be free (one task per device), runs
  the ``Executor``, and reports the outcome until the coordinator answers (``200``, or a ``409``
  which means give up).
- one renewal loop per run, every ``lease_ttl_ms * renew_fraction``, carrying the latest
  progress. A ``409``, or the local lease deadline (claim receipt + ``lease_ttl_ms``, moved on by
  each successful renewal) passing without a renewal, stops the run and nothing is reported:
  the lease is no longer ours. ``cancel_requested`` stops the run and it reports ``cancelled``.

Shutdown (``run``'s ``shutdown`` event): stop claiming, give running work ``shutdown_grace_s``
to finish, then stop it through its ``RunControl``, report what it returns, and return 0. A
``401`` (host credential revoked) or a crashed loop ends the agent the same way but returns 1.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.client import (
    Assignment,
    Conflict,
    HostClient,
    MalformedAnswer,
    ProtocolError,
    Rejected,
    TransientError,
    Unauthorized,
)
from agent.retry import Backoff
from agent.runtime.base import Outcome, Progress, RunControl

log = logging.getLogger("agent.host")

PROGRESS_SUMMARY_MAX_CHARS = 500  # the coordinator bounds it too; this keeps requests small
EXIT_OK = 0
EXIT_FATAL = 1


@dataclass(frozen=True)
class DeviceRecord:
    """One device in the heartbeat snapshot, by cloud id."""

    device_id: str
    driver: str
    attributes: dict[str, Any] = field(default_factory=dict)
    online: bool = True


class Executor(Protocol):
    """The seam between the protocol loops and the runtime (see ``agent/executor.py``)."""

    def devices(self) -> list[DeviceRecord]: ...

    async def run(self, assignment: Assignment, control: RunControl) -> Outcome:
        """Run one assignment to an ``Outcome``; honour ``control.stopped`` between steps."""
        ...


@dataclass
class _Run:
    assignment: Assignment
    control: RunControl
    deadline: float  # event-loop time by which a renewal must have succeeded
    holds_device: bool = False
    lease_lost: str | None = None
    cancel_requested: bool = False


async def _wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait until ``event`` is set or ``timeout`` passes. ``asyncio.timeout`` rather than
    ``wait_for``: on Python 3.11 ``wait_for`` can turn a cancellation into a TimeoutError."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass


def progress_body(progress: Progress | None) -> dict[str, Any] | None:
    """The bounded progress of a renewal: step index, status and short text, nothing else."""
    if progress is None:
        return None
    return {
        "step_index": int(progress.step_index),
        "status": str(progress.status),
        "summary": str(progress.summary)[:PROGRESS_SUMMARY_MAX_CHARS],
    }


class HostAgent:
    def __init__(
        self,
        client: HostClient,
        executor: Executor,
        *,
        hostname: str,
        version: str,
        labels: dict[str, str] | None = None,
        poll_wait_s: int = 25,
        heartbeat_interval_s: float = 15.0,
        shutdown_grace_s: float = 30.0,
        renew_fraction: float = 1 / 3,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        min_poll_interval_s: float = 1.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self._executor = executor
        self._agent_info = {"version": version, "hostname": hostname}
        self._labels = dict(labels or {})
        self._poll_wait_s = poll_wait_s
        self._heartbeat_interval_s = heartbeat_interval_s
        self._shutdown_grace_s = shutdown_grace_s
        self._renew_fraction = renew_fraction
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._min_poll_interval_s = min_poll_interval_s
        self._rng = rng

        self._held: dict[str, int] = {}  # device id -> assignments holding it (running or waiting)
        self._device_locks: dict[str, asyncio.Lock] = {}
        self._devices_changed = asyncio.Event()  # a device turned busy or idle
        self._snapshot_dirty = asyncio.Event()  # send a heartbeat soon
        self._runs: dict[asyncio.Task[None], _Run] = {}
        self._shutdown: asyncio.Event | None = None
        self._fatal: str | None = None
        self.heartbeats_sent = 0  # successful heartbeats, for tests and logs

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, shutdown: asyncio.Event) -> int:
        """Run the loops until ``shutdown`` is set (or a fatal 401); return the exit code."""
        self._shutdown = shutdown
        heartbeat = asyncio.create_task(self._guard("heartbeat loop", self._heartbeat_loop))
        claim = asyncio.create_task(self._guard("claim loop", self._claim_loop))
        await shutdown.wait()

        claim.cancel()
        await asyncio.gather(claim, return_exceptions=True)
        pending = set(self._runs)
        if pending:
            log.info(
                "shutting down: not claiming; waiting up to %.1fs for %d run(s)",
                self._shutdown_grace_s,
                len(pending),
            )
            _, pending = await asyncio.wait(pending, timeout=self._shutdown_grace_s)
        if pending:
            for task in pending:
                self._runs[task].control.stop("shutdown")
            log.info("grace period over: stopped %d run(s); waiting for their reports", len(pending))
            _, pending = await asyncio.wait(pending, timeout=max(self._shutdown_grace_s, 1.0))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)
        if self._fatal is not None:
            log.error("stopped: %s", self._fatal)
            return EXIT_FATAL
        log.info("stopped")
        return EXIT_OK

    def _die(self, reason: str) -> None:
        if self._fatal is None:
            self._fatal = reason
        if self._shutdown is not None:
            self._shutdown.set()

    async def _guard(
        self, name: str, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any, fatal: bool = True
    ) -> None:
        try:
            await fn(*args)  # the coroutine is made here, so a task cancelled early leaks none
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s crashed", name)
            if fatal:
                self._die(f"{name} crashed")

    def _backoff(self, base_s: float | None = None, cap_s: float | None = None) -> Backoff:
        return Backoff(
            self._backoff_base_s if base_s is None else base_s,
            self._backoff_cap_s if cap_s is None else cap_s,
            self._rng,
        )

    # -- devices -----------------------------------------------------------------------------

    def _known_devices(self) -> dict[str, DeviceRecord]:
        return {device.device_id: device for device in self._executor.devices()}

    def _any_idle(self) -> bool:
        return any(
            device.online and self._held.get(device_id, 0) == 0
            for device_id, device in self._known_devices().items()
        )

    async def _wait_any_idle(self) -> None:
        while not self._any_idle():
            self._devices_changed.clear()
            await self._devices_changed.wait()

    def _hold(self, device_id: str, delta: int) -> None:
        self._held[device_id] = self._held.get(device_id, 0) + delta
        self._devices_changed.set()
        self._snapshot_dirty.set()

    def snapshot(self) -> list[dict[str, Any]]:
        devices = []
        for device in self._executor.devices():
            if self._held.get(device.device_id, 0):
                status = "busy"
            else:
                status = "available" if device.online else "unavailable"
            devices.append(
                {
                    "device_id": device.device_id,
                    "driver": device.driver,
                    "status": status,
                    "attributes": device.attributes,
                    "labels": self._labels,
                }
            )
        return devices

    # -- heartbeat ---------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        backoff = self._backoff(cap_s=min(self._backoff_cap_s, self._heartbeat_interval_s))
        while True:
            self._snapshot_dirty.clear()
            delay = self._heartbeat_interval_s
            try:
                await self._client.heartbeat(self.snapshot(), self._agent_info)
            except Unauthorized:
                self._die("the coordinator rejected this host's credential (401): revoked or unknown")
                return
            except TransientError as exc:
                delay = backoff.next_delay()
                log.warning("heartbeat failed (%s); retry in %.2fs", exc, delay)
            except ProtocolError as exc:  # 409 unknown_device/device_conflict, 4xx: not fixed by retrying now
                log.error("heartbeat rejected: %s", exc)
            else:
                backoff.reset()
                self.heartbeats_sent += 1
            await _wait_event(self._snapshot_dirty, delay)

    # -- claim -------------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = self._backoff()
        while True:
            await self._wait_any_idle()
            claim_id = uuid.uuid4().hex
            while True:  # the same claim_id until an answer arrives
                sent_at = loop.time()
                try:
                    assignment = await self._client.claim(claim_id, self._poll_wait_s)
                except TransientError as exc:
                    delay = backoff.next_delay()
                    log.warning("claim %s failed (%s); same claim in %.2fs", claim_id, exc, delay)
                    await asyncio.sleep(delay)
                    continue
                except Unauthorized:
                    self._die("the coordinator rejected this host's credential (401): revoked or unknown")
                    return
                except (Rejected, MalformedAnswer) as exc:
                    delay = backoff.next_delay()
                    log.error("claim rejected: %s; new claim in %.2fs", exc, delay)
                    await asyncio.sleep(delay)
                    break
                backoff.reset()
                if assignment is not None:
                    self._start(assignment, received_at=loop.time())
                elif loop.time() - sent_at < self._min_poll_interval_s:
                    # An empty answer that came back at once (wait_s=0, or a busy server): don't spin.
                    await asyncio.sleep(self._min_poll_interval_s * self._rng())
                break

    def _start(self, assignment: Assignment, *, received_at: float) -> None:
        log.info(
            "claimed task %s attempt %d on device %s (lease %s, %d ms)",
            assignment.task_id,
            assignment.attempt,
            assignment.device_id,
            assignment.lease_id,
            assignment.lease_ttl_ms,
        )
        run = _Run(assignment, RunControl(), deadline=received_at + assignment.lease_ttl_ms / 1000)
        if assignment.device_id in self._known_devices():
            # Held before the claim loop looks again, so it does not poll for a device it just filled.
            self._hold(assignment.device_id, +1)
            run.holds_device = True
        task = asyncio.create_task(self._guard(f"run of {assignment.task_id}", self._run, run, fatal=False))
        self._runs[task] = run
        task.add_done_callback(self._runs.pop)

    # -- one assignment ----------------------------------------------------------------------

    async def _run(self, run: _Run) -> None:
        assignment = run.assignment
        device_id = assignment.device_id
        if not run.holds_device:
            log.error("task %s names device %s which this host does not have", assignment.task_id, device_id)
            await self._report(assignment, Outcome("failed", "device_not_found"))
            return
        renewer = asyncio.create_task(
            self._guard(f"renewal of {assignment.lease_id}", self._renew_loop, run, fatal=False)
        )
        try:
            lock = self._device_locks.setdefault(device_id, asyncio.Lock())
            if lock.locked():
                log.info("device %s is still busy; task %s waits for it", device_id, assignment.task_id)
            async with lock:
                if run.control.stopped:
                    outcome = None  # lease lost or shutting down before it could start
                else:
                    outcome = await self._execute(run)
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            if run.lease_lost is not None:
                log.warning(
                    "task %s attempt %d: lease lost (%s); not reporting",
                    assignment.task_id,
                    assignment.attempt,
                    run.lease_lost,
                )
                return
            if outcome is None:
                log.warning("task %s never started (%s); its lease will lapse", assignment.task_id, run.control.stop_reason)
                return
            if run.cancel_requested:
                # The operator's cancel wins, even over a run that finished while it stopped;
                # what the runner itself said stays visible in the metadata.
                outcome = Outcome(
                    "cancelled", "cancel_requested", {**outcome.metadata, "runner_status": outcome.status}
                )
            await self._report(assignment, outcome)
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            self._hold(device_id, -1)

    async def _execute(self, run: _Run) -> Outcome:
        try:
            outcome = await self._executor.run(run.assignment, run.control)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("task %s: the runtime raised", run.assignment.task_id)
            return Outcome("failed", "agent_error", {"error": type(exc).__name__})
        log.info(
            "task %s attempt %d finished: %s%s",
            run.assignment.task_id,
            run.assignment.attempt,
            outcome.status,
            f" ({outcome.failure_reason})" if outcome.failure_reason else "",
        )
        return outcome

    async def _renew_loop(self, run: _Run) -> None:
        loop = asyncio.get_running_loop()
        assignment = run.assignment
        ttl_s = assignment.lease_ttl_ms / 1000
        next_at = loop.time() + ttl_s * self._renew_fraction
        # Retries after a failed renewal must fit well inside the lease.
        backoff = self._backoff(base_s=min(self._backoff_base_s, ttl_s / 10), cap_s=ttl_s * self._renew_fraction)
        while True:
            wait = min(next_at, run.deadline) - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            sent_at = loop.time()
            if sent_at >= run.deadline:
                self._lose_lease(run, "local lease deadline passed")
                return
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
                async with asyncio.timeout(run.deadline - sent_at):
                    answer = await self._client.renew(
                        assignment.lease_id,
                        task_id=assignment.task_id,
                        attempt=assignment.attempt,
                        progress=progress_body(run.control.latest),
                    )
            except TimeoutError:
                self._lose_lease(run, "local lease deadline passed during renewal")
                return
            except Conflict as exc:
                self._lose_lease(run, exc.code or "409")
                return
            except Unauthorized:
                self._lose_lease(run, "401")
                self._die("the coordinator rejected this host's credential (401): revoked or unknown")
                return
            except ProtocolError as exc:
                delay = backoff.next_delay()
                log.warning("renewal of lease %s failed (%s); retry in %.2fs", assignment.lease_id, exc, delay)
                next_at = loop.time() + delay
                continue
            backoff.reset()
            ttl_ms = answer.get("lease_ttl_ms")
            if isinstance(ttl_ms, int) and not isinstance(ttl_ms, bool) and ttl_ms > 0:
                ttl_s = ttl_ms / 1000
            run.deadline = sent_at + ttl_s
            next_at = sent_at + ttl_s * self._renew_fraction
            if answer.get("cancel_requested") is True and not run.cancel_requested:
                log.info("task %s: cancel requested; stopping it", assignment.task_id)
                run.cancel_requested = True
                run.control.stop("cancel_requested")

    def _lose_lease(self, run: _Run, reason: str) -> None:
        if run.lease_lost is None:
            run.lease_lost = reason
            log.warning("task %s attempt %d: lease lost (%s); stopping it", run.assignment.task_id, run.assignment.attempt, reason)
        run.control.stop("lease_lost")

    # -- results -----------------------------------------------------------------------------

    async def _report(self, assignment: Assignment, outcome: Outcome) -> None:
        """Send the terminal result until the coordinator answers it (200, or 409: give up)."""
        backoff = self._backoff()
        while True:
            try:
                answer = await self._client.report_result(
                    task_id=assignment.task_id,
                    attempt=assignment.attempt,
                    lease_id=assignment.lease_id,
                    status=outcome.status,
                    failure_reason=outcome.failure_reason,
                    metadata=dict(outcome.metadata),
                )
            except TransientError as exc:
                delay = backoff.next_delay()
                log.warning("result for task %s failed (%s); retry in %.2fs", assignment.task_id, exc, delay)
                await asyncio.sleep(delay)
                continue
            except Conflict as exc:
                log.warning("result for task %s refused (%s); giving up", assignment.task_id, exc.code)
                return
            except Unauthorized:
                self._die("the coordinator rejected this host's credential (401): revoked or unknown")
                return
            except ProtocolError as exc:
                log.error("result for task %s rejected (%s); giving up", assignment.task_id, exc)
                return
            replayed = isinstance(answer, dict) and answer.get("replayed") is True
            log.info(
                "reported task %s attempt %d: %s%s",
                assignment.task_id,
                assignment.attempt,
                outcome.status,
                " (replayed)" if replayed else "",
            )
            return
