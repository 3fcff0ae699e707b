"""The host agent's host-wide loops, in one asyncio process, talking outbound only.

- heartbeat: ``agent/heartbeat.py`` (the snapshot at the coordinator's interval, and soon after
  it changes; draining; enrolling again on ``409 unknown_device``).
- devices: every ``device_refresh_s`` the executor re-reads device state and enrolls devices
  found since start-up; a changed snapshot is heartbeated at once, and a device coming online
  wakes the claim loop.
- claim: while at least one device is idle, exactly one long-poll is open. After a network
  error the poll is retried with the *same* ``claim_id``, so an assignment whose response was
  lost is handed back instead of orphaned; a new ``claim_id`` is used only once an answer came.
- each claimed assignment holds its device from claim until it is reported, and runs as one
  ``LeasedRun`` (``agent/lease_run.py``: device wait, execution, renewal, result).
- eager dispatch: a run's result asks for its device's next assignment (``"next": true``) until
  shutdown; one in the answer starts at once, as a claimed one would, holding the device before
  the run that reported lets it go, so the claim loop never polls for it meanwhile and keeps
  serving the other devices.

Every "same request again" goes through ``agent/retry.py`` under the one ``RetryPolicy``.
Settings come in one ``HostConfig`` (``agent/host_config.py``).

Shutdown (``run``'s ``shutdown`` event): stop claiming, give running work ``shutdown_grace_s``
to finish, then stop it through its ``RunControl``, report what it returns, and return 0. A
``401`` (host credential revoked, or unknown: the coordinator's Redis lost its data), a ``403``
(a valid credential of another host: a configuration mistake), or a crashed loop ends the agent
the same way but returns 1. A 401 is not logged here but left to the caller
(``credential_refused``), which stops or enrolls the host again (``agent/app.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from agent.answers import Assignment, Forbidden, MalformedAnswer, Rejected, Unauthorized
from agent.client import HostClient
from agent.heartbeat import Heartbeat, Pause, wait_event
from agent.host_config import HostConfig
from agent.lease_run import LeasedRun
from agent.renewals import HostRenewals
from agent.retry import retry
from agent.runtime import SHUTDOWN, DeviceRecord, Executor
from agent.settings import ENV_PREFIX
from wire import DeviceStatus

log = logging.getLogger("agent.host")

_REVOKED = "the coordinator rejected this host's credential (401): revoked, or unknown to it"
EXIT_OK = 0
EXIT_FATAL = 1


class HostAgent:
    """The host-wide loops of one host, configured by ``config``.

    ``pause(event, seconds)`` is the heartbeat loop's wait (until the event is set or the time
    passes); tests inject one to observe the schedule. ``clock`` (monotonic seconds) times claims
    and the leases they bring; tests inject one to pass a lease's deadline."""

    def __init__(self, client: HostClient, executor: Executor, config: HostConfig, *,
                 pause: Pause = wait_event, clock: Callable[[], float] = time.monotonic,
                 on_ready: Callable[[], None] = lambda: None) -> None:
        self._client = client
        self._executor = executor
        self._config = config
        self._labels = dict(config.labels)
        self._retry = config.retry_policy
        self._clock = clock
        self._devices_changed = asyncio.Event()  # a device turned busy or idle, or was renamed
        self._on_ready: Callable[[], None] | None = on_ready  # None once told
        self._heartbeat = Heartbeat(client, executor, self.snapshot, config, on_revoked=self._revoked,
                                    on_devices_renamed=self._devices_changed.set, on_forbidden=self._forbidden,
                                    on_answer=self._answered, pause=pause)

        self._held: dict[str, int] = {}  # device id -> assignments holding it (running or waiting)
        self._device_locks: dict[str, asyncio.Lock] = {}
        self._runs: dict[asyncio.Task[None], LeasedRun] = {}
        self._renewals = HostRenewals(client, clock)  # every run's lease, renewed together
        self._shutdown: asyncio.Event | None = None
        self._fatal: str | None = None
        self.credential_refused = False  # a 401 ended the run: the caller says so, once

    # Public for logs and tests: what the heartbeat loop last learned.
    @property
    def heartbeat_interval_s(self) -> float:
        """The heartbeat interval in force."""
        return self._heartbeat.interval_s

    @property
    def draining(self) -> bool:
        """The coordinator's last word on whether this host is draining."""
        return self._heartbeat.draining

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, shutdown: asyncio.Event) -> int:
        """Run the loops until ``shutdown`` is set (or a fatal 401); return the exit code."""
        self._shutdown = shutdown
        heartbeat = asyncio.create_task(self._guard("heartbeat loop", self._heartbeat.run))
        claim = asyncio.create_task(self._guard("claim loop", self._claim_loop))
        devices = asyncio.create_task(self._guard("device loop", self._device_loop))
        await shutdown.wait()

        claim.cancel()
        await asyncio.gather(claim, return_exceptions=True)
        pending = set(self._runs)
        if pending:
            log.info(
                "shutting down: not claiming; waiting up to %.1fs for %d run(s)",
                self._config.shutdown_grace_s,
                len(pending),
            )
            _, pending = await asyncio.wait(pending, timeout=self._config.shutdown_grace_s)
        if pending:
            for task in pending:
                self._runs[task].control.stop(SHUTDOWN)
            log.info("grace period over: stopped %d run(s); waiting for their reports", len(pending))
            _, pending = await asyncio.wait(pending, timeout=max(self._config.shutdown_grace_s, 1.0))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        # A run a result's answer started as the agent began to stop starts stopped (_start_next):
        # its report, for another attempt, is waited for like the others'.
        late = set(self._runs)
        if late:
            _, late = await asyncio.wait(late, timeout=max(self._config.shutdown_grace_s, 1.0))
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
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

    def _forbidden(self) -> None:
        """403 on this host's own path: the credential is valid, but another host's. A mistake
        in the configuration, which no retry fixes: stop in one line, as a wrong token does."""
        if self._config.managed:
            hint = f"the identity stored in {ENV_PREFIX}STATE_DIR does not match its token"
        else:
            hint = f"{ENV_PREFIX}TOKEN is another host's token; check {ENV_PREFIX}HOST_ID and {ENV_PREFIX}TOKEN"
        self._die(f"the coordinator refused host {self._client.host_id} with this credential (403 forbidden): {hint}")

    def _answered(self) -> None:
        """A heartbeat was answered: the first one makes the host ready (the coordinator knows it)."""
        ready, self._on_ready = self._on_ready, None
        if ready is not None:
            ready()

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
        self._heartbeat.soon()

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

    # -- device refresh ----------------------------------------------------------------------

    async def _device_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.device_refresh_s)
            before = self._executor.devices()
            try:
                await self._executor.refresh()
            except Unauthorized:
                self._revoked()
                return
            except Exception:
                # A flaky adb or a malformed answer must not end the agent: the next round retries.
                log.exception("device refresh failed; next try in %gs", self._config.device_refresh_s)
                continue
            if self._executor.devices() != before:
                self._devices_changed.set()  # a device came online or appeared: maybe poll again
                self._heartbeat.soon()  # and the coordinator should know now, not next interval

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
                return await self._client.claim(claim_id, self._config.poll_wait_s)

            try:
                # The same claim_id until an answer arrives: an assignment whose response was
                # lost is then handed back instead of orphaned.
                assignment = await retry(poll, backoff, what=f"claim {claim_id}")
            except Unauthorized:
                self._revoked()
                return
            except Forbidden:
                self._forbidden()
                return
            except (Rejected, MalformedAnswer) as exc:
                delay = backoff.next_delay()
                log.error("claim rejected: %s; new claim in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            if assignment is not None:
                self._start(assignment, received_at=self._clock())
            elif self._clock() - sent_at < self._config.min_poll_interval_s:
                # An empty answer that came back at once (wait_s=0, or a busy server): don't spin.
                await asyncio.sleep(self._config.min_poll_interval_s * self._retry.rng())

    def _next_wanted(self) -> bool:
        """Whether a result should ask for its device's next assignment: not once shutting down."""
        return self._shutdown is None or not self._shutdown.is_set()

    def _start_next(self, assignment: Assignment, received_at: float) -> None:
        """A result's answer carried the device's next assignment (eager dispatch): run it as a
        claimed one. Arrived as the agent began to stop, it is stopped before it starts and so
        reported as the shutdown's (retryable) for another attempt."""
        run = self._start(assignment, received_at=received_at, how="took from its result's answer")
        if not self._next_wanted():
            run.control.stop(SHUTDOWN)

    def _start(self, assignment: Assignment, *, received_at: float, how: str = "claimed") -> LeasedRun:
        log.info(
            "%s task %s attempt %d on device %s (lease %s, %d ms)",
            how,
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
            renew_fraction=self._config.renew_fraction,
            retry_policy=self._retry,
            on_unauthorized=self._revoked,
            clock=self._clock,
            artifacts=self._config.artifacts,
            artifact_drain_s=self._config.artifact_drain_s,
            renewals=self._renewals,
            next_wanted=self._next_wanted,
            on_next=self._start_next,
        )
        task = asyncio.create_task(
            self._guard(f"run of {assignment.task_id}", self._run, run, device_lock is not None, fatal=False)
        )
        self._runs[task] = run
        task.add_done_callback(self._runs.pop)
        return run

    async def _run(self, run: LeasedRun, holds_device: bool) -> None:
        """One assignment's run; the device it held is free again once it is reported (or given up)."""
        try:
            await run.run()
        finally:
            if holds_device:
                self._hold(run.assignment.device_id, -1)
