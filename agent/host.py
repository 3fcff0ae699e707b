"""The host agent's host-wide loops, in one asyncio process, talking outbound only.

- heartbeat: the complete device snapshot at the interval the coordinator's last answer gave
  (``heartbeat_interval_s``, kept within ``HEARTBEAT_INTERVAL_BOUNDS_S``; the agent's own setting
  is only used until the first answer), and soon after the snapshot changes. A device holding an
  assignment reports ``busy``; one its driver cannot reach, ``unavailable``. The answer's
  ``draining`` is followed (``draining``, logged when it changes): a draining host gets no new
  work from the coordinator but keeps heartbeating, polling and finishing what it runs.
  ``409 unknown_device`` means an operator un-enrolled one of a managed host's devices: the
  agent enrolls its devices again (the forgotten one gets a new cloud id), then heartbeats after
  the loop's backoff; once per rejection, so a coordinator that keeps refusing cannot make it spin.
- devices: every ``device_refresh_s`` the executor re-reads device state and enrolls devices
  found since start-up; a changed snapshot is heartbeated at once, and a device coming online
  wakes the claim loop.
- claim: while at least one device is idle, exactly one long-poll is open. After a network
  error the poll is retried with the *same* ``claim_id``, so an assignment whose response was
  lost is handed back instead of orphaned; a new ``claim_id`` is used only once an answer came.
- each claimed assignment holds its device from claim until it is reported, and runs as one
  ``LeasedRun`` (``agent/lease_run.py``: device wait, execution, renewal, result).

Every "same request again" goes through ``agent/retry.py`` under the one ``RetryPolicy``.

Shutdown (``run``'s ``shutdown`` event): stop claiming, give running work ``shutdown_grace_s``
to finish, then stop it through its ``RunControl``, report what it returns, and return 0. A
``401`` (host credential revoked, or unknown: the coordinator's Redis lost its data) or a crashed
loop ends the agent the same way but returns 1. A 401 is not logged here but left to the caller
(``credential_refused``), which stops or enrolls the host again (``agent/app.py``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

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
from agent.lease_run import LeasedRun
from agent.retry import RetryPolicy, retry
from agent.runtime import SHUTDOWN, DeviceRecord, Executor
from wire import DeviceStatus, ErrorCode

log = logging.getLogger("agent.host")

_REVOKED = "the coordinator rejected this host's credential (401): revoked, or unknown to it"
EXIT_OK = 0
EXIT_FATAL = 1
# The coordinator's heartbeat interval is followed within these bounds, so a misconfigured
# coordinator can neither make a fleet hammer it nor make hosts look dead for minutes.
HEARTBEAT_INTERVAL_BOUNDS_S = (1.0, 300.0)


async def _wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait until ``event`` is set or ``timeout`` passes. ``asyncio.timeout`` rather than
    ``wait_for``: on Python 3.11 ``wait_for`` can turn a cancellation into a TimeoutError."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass


def heartbeat_interval_from(answer: Any) -> float | None:
    """The coordinator's ``heartbeat_interval_s``, within ``HEARTBEAT_INTERVAL_BOUNDS_S``;
    ``None`` when the answer has no usable one."""
    value = answer.get("heartbeat_interval_s") if isinstance(answer, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    low, high = HEARTBEAT_INTERVAL_BOUNDS_S
    return min(max(float(value), low), high)


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
        device_refresh_s: float = 5.0,
        shutdown_grace_s: float = 30.0,
        renew_fraction: float = 1 / 3,
        retry_policy: RetryPolicy | None = None,
        min_poll_interval_s: float = 1.0,
        managed: bool = False,
        pause: Callable[[asyncio.Event, float], Awaitable[None]] = _wait_event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``heartbeat_interval_s`` applies until the coordinator answers with its own.
        ``retry_policy`` governs every retry of every loop and run (its ``rng`` also jitters
        the pause after an empty poll). ``managed``: an enrolled host, whose devices are enrolled
        again when the coordinator no longer knows one (a legacy host never enrolls).
        ``pause(event, seconds)`` is the heartbeat loop's wait (until the event is set or the
        time passes); tests inject one to observe the schedule. ``clock`` (monotonic seconds)
        times claims and the leases they bring; tests inject one to pass a lease's deadline."""
        self._client = client
        self._executor = executor
        self._agent_info = {"version": version, "hostname": hostname}
        self._labels = dict(labels or {})
        self._poll_wait_s = poll_wait_s
        self.heartbeat_interval_s = heartbeat_interval_s  # the one in force; public for logs and tests
        self._device_refresh_s = device_refresh_s
        self._pause = pause
        self._shutdown_grace_s = shutdown_grace_s
        self._renew_fraction = renew_fraction
        self._retry = retry_policy or RetryPolicy()
        self._min_poll_interval_s = min_poll_interval_s
        self._managed = managed
        self._clock = clock

        self._held: dict[str, int] = {}  # device id -> assignments holding it (running or waiting)
        self._device_locks: dict[str, asyncio.Lock] = {}
        self._devices_changed = asyncio.Event()  # a device turned busy or idle
        self._snapshot_dirty = asyncio.Event()  # send a heartbeat soon
        self._runs: dict[asyncio.Task[None], LeasedRun] = {}
        self._shutdown: asyncio.Event | None = None
        self._fatal: str | None = None
        self.heartbeats_sent = 0  # successful heartbeats, for tests and logs
        self.draining = False  # the coordinator's last word; public for logs and tests
        self.credential_refused = False  # a 401 ended the run: the caller says so, once

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, shutdown: asyncio.Event) -> int:
        """Run the loops until ``shutdown`` is set (or a fatal 401); return the exit code."""
        self._shutdown = shutdown
        heartbeat = asyncio.create_task(self._guard("heartbeat loop", self._heartbeat_loop))
        claim = asyncio.create_task(self._guard("claim loop", self._claim_loop))
        devices = asyncio.create_task(self._guard("device loop", self._device_loop))
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
                self._runs[task].control.stop(SHUTDOWN)
            log.info("grace period over: stopped %d run(s); waiting for their reports", len(pending))
            _, pending = await asyncio.wait(pending, timeout=max(self._shutdown_grace_s, 1.0))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        heartbeat.cancel()
        devices.cancel()
        await asyncio.gather(heartbeat, devices, return_exceptions=True)
        if self.credential_refused:
            return EXIT_FATAL
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

    def _revoked(self) -> None:
        if self._fatal is None:
            self.credential_refused = True
        self._die(_REVOKED)

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

    # -- devices -----------------------------------------------------------------------------

    def _known_devices(self) -> dict[str, DeviceRecord]:
        """The executor's devices by cloud id (it reports enrolled devices only)."""
        return {device.device_id: device for device in self._executor.devices() if device.device_id is not None}

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
        for device_id, device in self._known_devices().items():
            if self._held.get(device_id, 0):
                status = DeviceStatus.BUSY
            else:
                status = DeviceStatus.AVAILABLE if device.online else DeviceStatus.UNAVAILABLE
            devices.append(
                {
                    "device_id": device_id,
                    "driver": device.driver,
                    "status": status.value,
                    "attributes": device.attributes,
                    "labels": self._labels,
                }
            )
        return devices

    # -- heartbeat ---------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        backoff = self._retry.backoff()

        async def send() -> Any:
            self._snapshot_dirty.clear()  # this snapshot is the newest the coordinator will have
            return await self._client.heartbeat(self.snapshot(), self._agent_info)

        async def pause(seconds: float) -> None:
            await self._pause(self._snapshot_dirty, seconds)

        while True:
            # Retries stay within one interval, so a short outage does not cost a missed beat.
            backoff.policy = replace(self._retry, cap_s=min(self._retry.cap_s, self.heartbeat_interval_s))
            try:
                answer = await retry(send, backoff, what="heartbeat", sleep=pause)
            except Unauthorized:
                self._revoked()
                return
            except ProtocolError as exc:  # 409 unknown_device/device_conflict, 4xx: not fixed by retrying now
                if self._managed and isinstance(exc, Conflict) and exc.code == ErrorCode.UNKNOWN_DEVICE:
                    if not await self._enroll_again(exc):
                        return
                    # The next heartbeat after the loop's backoff, not woken early by a snapshot
                    # change: a coordinator that keeps refusing gets one enrollment per rejection.
                    await self._pause(asyncio.Event(), backoff.next_delay())
                    continue
                log.error("heartbeat rejected: %s", exc)
                delay = self.heartbeat_interval_s
            else:
                self.heartbeats_sent += 1
                self._follow_draining(answer)
                delay = self._follow_interval(answer)
            await self._pause(self._snapshot_dirty, delay)

    async def _enroll_again(self, rejection: Conflict) -> bool:
        """A managed host's answer to ``409 unknown_device``: an operator un-enrolled one of its
        devices, so every heartbeat naming it would be refused and the host would go offline.
        Enroll the devices again (idempotent; the forgotten one gets a new cloud id, persisted
        before use) so the next heartbeat reports it. False when the credential is gone."""
        device_id = rejection.details.get("device_id")
        log.warning(
            "the coordinator no longer knows device %s (409 unknown_device: un-enrolled?); "
            "enrolling this host's devices again",
            device_id if isinstance(device_id, str) else "(not named)",
        )
        try:
            changed = await self._executor.reenroll()
        except Unauthorized:
            self._revoked()
            return False
        except (TransientError, Rejected, MalformedAnswer) as exc:
            log.error("enrolling the devices again failed (%s); trying again after the next heartbeat", exc)
            return True
        if changed:
            log.info(
                "devices enrolled again; now reporting %s",
                ", ".join(f"{local_id} as {device_id}" for local_id, device_id in changed.items()),
            )
            self._devices_changed.set()  # a device under a new id: the claim loop looks again
        else:
            log.warning("devices enrolled again; no cloud id changed")
        return True

    def _follow_draining(self, answer: Any) -> None:
        draining = answer.get("draining") if isinstance(answer, dict) else None
        if not isinstance(draining, bool) or draining == self.draining:
            return
        self.draining = draining
        if draining:
            log.info("coordinator: this host is draining; no new work is assigned, running work finishes")
        else:
            log.info("coordinator: this host is no longer draining; new work may be assigned")

    def _follow_interval(self, answer: Any) -> float:
        interval = heartbeat_interval_from(answer)
        if interval is not None and interval != self.heartbeat_interval_s:
            given = answer["heartbeat_interval_s"]
            if interval != given:
                log.warning("coordinator heartbeat interval %ss is out of bounds; using %gs", given, interval)
            else:
                log.info("heartbeating every %gs, as the coordinator asks", interval)
            self.heartbeat_interval_s = interval
        return self.heartbeat_interval_s

    # -- device refresh ----------------------------------------------------------------------

    async def _device_loop(self) -> None:
        while True:
            await asyncio.sleep(self._device_refresh_s)
            before = self._executor.devices()
            try:
                await self._executor.refresh()
            except Unauthorized:
                self._revoked()
                return
            except Exception:
                # A flaky adb or a malformed answer must not end the agent: the next round retries.
                log.exception("device refresh failed; next try in %gs", self._device_refresh_s)
                continue
            if self._executor.devices() != before:
                self._devices_changed.set()  # a device came online or appeared: maybe poll again
                self._snapshot_dirty.set()  # and the coordinator should know now, not next interval

    # -- claim -------------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        backoff = self._retry.backoff()  # shared by every claim: a rejection backs off the next one
        while True:
            await self._wait_any_idle()
            claim_id = uuid.uuid4().hex
            sent_at = self._clock()

            async def poll(claim_id: str = claim_id) -> Assignment | None:
                nonlocal sent_at
                sent_at = self._clock()
                return await self._client.claim(claim_id, self._poll_wait_s)

            try:
                # The same claim_id until an answer arrives: an assignment whose response was
                # lost is then handed back instead of orphaned.
                assignment = await retry(poll, backoff, what=f"claim {claim_id}")
            except Unauthorized:
                self._revoked()
                return
            except (Rejected, MalformedAnswer) as exc:
                delay = backoff.next_delay()
                log.error("claim rejected: %s; new claim in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            if assignment is not None:
                self._start(assignment, received_at=self._clock())
            elif self._clock() - sent_at < self._min_poll_interval_s:
                # An empty answer that came back at once (wait_s=0, or a busy server): don't spin.
                await asyncio.sleep(self._min_poll_interval_s * self._retry.rng())

    def _start(self, assignment: Assignment, *, received_at: float) -> None:
        log.info(
            "claimed task %s attempt %d on device %s (lease %s, %d ms)",
            assignment.task_id,
            assignment.attempt,
            assignment.device_id,
            assignment.lease_id,
            assignment.lease_ttl_ms,
        )
        device_id = assignment.device_id
        device_lock: asyncio.Lock | None = None
        if device_id in self._known_devices():
            # Held before the claim loop looks again, so it does not poll for a device it just filled.
            self._hold(device_id, +1)
            device_lock = self._device_locks.setdefault(device_id, asyncio.Lock())
        run = LeasedRun(
            assignment,
            client=self._client,
            executor=self._executor,
            device_lock=device_lock,
            received_at=received_at,
            renew_fraction=self._renew_fraction,
            retry_policy=self._retry,
            on_unauthorized=self._revoked,
            clock=self._clock,
        )
        task = asyncio.create_task(
            self._guard(f"run of {assignment.task_id}", self._run, run, device_lock is not None, fatal=False)
        )
        self._runs[task] = run
        task.add_done_callback(self._runs.pop)

    async def _run(self, run: LeasedRun, holds_device: bool) -> None:
        """One assignment's run; the device it held is free again once it is reported (or given up)."""
        try:
            await run.run()
        finally:
            if holds_device:
                self._hold(run.assignment.device_id, -1)
