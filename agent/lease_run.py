"""The life of one claimed assignment under its lease, from claim receipt to result.

- The run waits for its device (one assignment per device at a time; the ``HostAgent`` hands it
  the device's lock), then runs the ``Executor``, and reports the outcome until the coordinator
  answers (``200``, or a ``409`` which means give up).
- Renewal starts at once, so the lease is kept while the run still waits for its device: every
  ``lease_ttl_ms * renew_fraction``, carrying the latest progress. When the step changes (its
  index or status) the renewal comes early, at most once every ``EARLY_RENEW_MIN_GAP_S`` per
  lease (PROTOCOL.md, renew), so an operator sees each step as it happens, not at the lease's
  rhythm, and a fast workflow still costs at most one request a second. A ``409``, or the local lease
  deadline (claim receipt + ``lease_ttl_ms``, moved on by each successful renewal) passing
  without a renewal, stops the run and nothing is reported: the lease is no longer ours.
  ``cancel_requested`` stops the run and it reports ``cancelled``.

Eager dispatch: the report asks for the device's next assignment (``"next": true``) when
``next_wanted()`` says the agent can run one (not shutting down) and the run was not a retryable
failure, and its retries keep asking; one that comes in the answer is handed to ``on_next``,
which starts it without a claim.

A ``401`` on renewal or report means the host credential is gone: the run tells the agent
(``on_unauthorized``), which shuts down.

A failure that is not the task's fault is reported ``"retryable": true`` and the coordinator
requeues the task as ``attempt + 1`` while attempts remain: the device is gone (``device_gone``:
not this host's, at claim or at run start), the runtime's own retryable outcomes (the device
lost or unreachable, see ``agent/executor.py``), and a run the agent's shutdown stopped, or that
never started before it (``shutdown``). An operator's cancel still wins over all of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from agent.answers import Assignment, Conflict, ProtocolError, Unauthorized
from agent.artifacts import DRAIN_S, ArtifactMode, RunArtifacts
from agent.client import HostClient
from agent.renewals import HostRenewals
from agent.report import report_result
from agent.retry import RetryPolicy, retry
from agent.runtime import (
    DEVICE_GONE,
    SHUTDOWN,
    DeviceNotFound,
    Driver,
    Executor,
    Outcome,
    Progress,
    RunControl,
)
from agent.session_run import SESSION_KIND, SessionRun, poll_wait_s
from wire import PROGRESS_SUMMARY_MAX_CHARS, ResultStatus

log = logging.getLogger("agent.lease_run")

# The shortest time between two renewals of one lease when the earlier one was not yet due: a
# step change renews early, but never more often than this.
EARLY_RENEW_MIN_GAP_S = 1.0


class _DeadlinePassed(Exception):
    """The local lease deadline passed before a renewal got through: the lease is gone."""


def progress_body(progress: Progress | None) -> dict[str, Any] | None:
    """The bounded progress of a renewal: step index, status and short text, nothing else. The
    summary is cut to the coordinator's default bound here, so requests stay small."""
    if progress is None:
        return None
    return {
        "step_index": int(progress.step_index),
        "status": str(progress.status),
        "summary": str(progress.summary)[:PROGRESS_SUMMARY_MAX_CHARS],
    }


class LeasedRun:
    """Runs one assignment under its lease; ``run()`` returns once it is reported or given up.

    ``device_lock`` is ``None`` when this host does not have the device the assignment names:
    the run then reports ``failed``/``device_gone`` (retryable) and does nothing else; the same
    report follows when the executor finds the device gone by the time the run starts
    (``DeviceNotFound``). ``control`` is public so the agent can stop the run at shutdown
    (``control.stop(SHUTDOWN)``): a run it stopped, or that had not started yet, is reported
    ``failed``/``shutdown`` (retryable). ``clock`` (seconds, monotonic; ``received_at`` is on
    it) decides when the lease is lost: tests drive it to pass the deadline when they choose.
    """

    def __init__(
        self,
        assignment: Assignment,
        *,
        client: HostClient,
        executor: Executor,
        device_lock: asyncio.Lock | None,
        received_at: float,
        renew_fraction: float,
        retry_policy: RetryPolicy,
        on_unauthorized: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        artifacts: ArtifactMode = ArtifactMode.OFF,
        artifact_drain_s: float = DRAIN_S,
        renewals: HostRenewals | None = None,
        next_wanted: Callable[[], bool] = lambda: False,
        on_next: Callable[[Assignment, float], None] | None = None,
    ) -> None:
        self.assignment = assignment
        self._next_wanted = next_wanted
        self._on_next = on_next
        self._clock = clock
        # The run's screens and log (``agent/artifacts.py``): public, so a test can see what
        # became of each upload.
        self.evidence = RunArtifacts(client, assignment, artifacts, retry_policy, drain_s=artifact_drain_s)
        self.control = RunControl(on_progress=self._on_progress, evidence=self.evidence)
        # Set when the published step differs from the one the latest renewal carried: the
        # renewal loop wakes (``_wake``) and renews early (rate-limited). A batch this lease rode
        # in wakes it too, to measure its wait again.
        self._step_dirty = False
        self._wake = asyncio.Event()
        self._renewed_step: tuple[int, str] | None = None
        # The host's renewals, which batch this lease's with its other leases' (agent/renewals.py);
        # a run of its own renews alone.
        self._renewals = renewals if renewals is not None else HostRenewals(client, clock)
        self._client = client
        self._executor = executor
        self._device_lock = device_lock
        self._renew_fraction = renew_fraction
        self._retry = retry_policy
        self._on_unauthorized = on_unauthorized
        # The clock's time by which a renewal must have succeeded, and when the next periodic one
        # is due; each renewal moves both on.
        self._ttl_s = assignment.lease_ttl_ms / 1000
        self._deadline = received_at + self._ttl_s
        self._next_at = received_at + self._ttl_s * renew_fraction
        self._last_sent = -float("inf")  # no renewal yet: the first step change renews at once
        self._lease_lost: str | None = None
        self._cancel_requested = False

    async def run(self) -> None:
        if self.evidence.mode == ArtifactMode.OFF:
            await self._run()
            return
        with self.evidence.log.capturing():  # this run's log lines, and its tasks', for log.txt
            await self._run()

    async def _run(self) -> None:
        assignment = self.assignment
        lock = self._device_lock
        if lock is None:
            await self._report(self._device_gone())
            return
        renewer = asyncio.create_task(self._renew())
        try:
            if lock.locked():
                log.info("device %s is still busy; task %s waits for it", assignment.device_id, assignment.task_id)
            async with lock:
                if self.control.stopped:
                    outcome = None  # lease lost or shutting down before it could start
                else:
                    outcome = await self._execute()
            # The evidence goes up before the report, while renewal still keeps the lease: the
            # result ends the lease, and the coordinator refuses uploads to an ended lease. The
            # wait is bounded (a few seconds); what is not up by then is given up. Not when the
            # agent is shutting down: then the report comes first, within the grace it has.
            if self._lease_lost is None and self.control.stop_reason != SHUTDOWN:
                await self.evidence.finish(outcome)
            await self.evidence.abandon()
            # Renewal stops before the report, and before the lease state below is read.
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            if self._lease_lost is not None:
                log.warning(
                    "task %s attempt %d: lease lost (%s); not reporting",
                    assignment.task_id,
                    assignment.attempt,
                    self._lease_lost,
                )
                return
            if self._cancel_requested:
                if outcome is None:
                    log.warning("task %s cancelled before it started; its lease will lapse", assignment.task_id)
                    return
                # The operator's cancel wins, even over a run that finished while it stopped;
                # what the runner itself said stays visible in the metadata.
                outcome = Outcome(
                    ResultStatus.CANCELLED,
                    "cancel_requested",
                    {**outcome.metadata, "runner_status": outcome.status.value},
                )
            elif self.control.stop_reason == SHUTDOWN and (outcome is None or outcome.status == ResultStatus.CANCELLED):
                # Stopped (or never started) because this agent is going away, not because of the
                # task: another attempt, here later or elsewhere, may run it to the end. A run
                # that ended on its own terms meanwhile is reported as it ended.
                log.info("task %s attempt %d: stopped by the shutdown", assignment.task_id, assignment.attempt)
                metadata = {"steps": 0} if outcome is None else outcome.metadata
                outcome = Outcome.retryable_failure(SHUTDOWN, metadata)
            elif outcome is None:
                log.warning("task %s never started (%s); its lease will lapse", assignment.task_id,
                            self.control.stop_reason)
                return
            await self._report(outcome)
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            await self.evidence.abandon()

    def _device_gone(self) -> Outcome:
        """The one verdict for an assignment naming a device this host does not have (any more):
        the device went away, not the task's fault, so another attempt may run it elsewhere."""
        assignment = self.assignment
        log.error("task %s names device %s which this host does not have", assignment.task_id, assignment.device_id)
        return Outcome.retryable_failure(DEVICE_GONE, {"device_id": assignment.device_id})

    async def _execute(self) -> Outcome:
        assignment = self.assignment
        try:
            if assignment.kind == SESSION_KIND:  # a live session: its own loop (agent/session_run.py)
                outcome = await self._session(self._executor.driver_for(assignment.device_id)).run()
            else:
                outcome = await self._executor.run(assignment, self.control)
        except asyncio.CancelledError:
            raise
        except DeviceNotFound:  # bound at claim time, gone (unplugged, dropped) by now
            return self._device_gone()
        except Exception as exc:
            log.exception("task %s: the runtime raised", assignment.task_id)
            return Outcome(ResultStatus.FAILED, "agent_error", {"error": type(exc).__name__})
        if outcome.status == ResultStatus.FAILED and "last_steps" not in outcome.metadata and self.control.last_steps:
            # The coordinator's stored progress may lag the failure (renewals carry it at most
            # once a second): the result says what led to it, for the run's report.
            steps = [progress_body(step) for step in self.control.last_steps]
            outcome = Outcome(outcome.status, outcome.failure_reason, {**outcome.metadata, "last_steps": steps},
                              retryable=outcome.retryable)
        log.info(
            "task %s attempt %d finished: %s%s",
            assignment.task_id,
            assignment.attempt,
            outcome.status.value,
            f" ({outcome.failure_reason})" if outcome.failure_reason else "",
        )
        return outcome

    def _session(self, driver: Driver) -> SessionRun:
        """A session's command loop: its polls renew the lease (``renewed_alongside``), so the
        renewal loop only comes due while a command runs long."""
        return SessionRun(self.assignment, client=self._client, driver=driver, control=self.control,
                          retry_policy=self._retry, renewed=lambda answer, sent_at: self.renewed_alongside(
                              {**answer, "status": 200}, sent_at),
                          lost=self._lose_lease, unauthorized=self._on_unauthorized, clock=self._clock,
                          wait_s=poll_wait_s(self.assignment.lease_ttl_ms, self._renew_fraction))

    # -- renewal -----------------------------------------------------------------------------

    def _on_progress(self, progress: Progress) -> None:
        if _step_of(progress) != self._renewed_step:
            self._step_dirty = True
            self._wake.set()

    def renewal_entry(self) -> dict[str, Any]:
        """What a renewal of this lease sends now (``agent/renewals.py``): the latest progress, on
        every try, whether this run asked for the renewal or rides in another's batch."""
        latest = self.control.latest
        self._step_dirty = False  # a change from here on asks for the next renewal
        self._renewed_step = _step_of(latest)
        assignment = self.assignment
        return {"lease_id": assignment.lease_id, "task_id": assignment.task_id, "attempt": assignment.attempt,
                "progress": progress_body(latest)}

    def renewed_alongside(self, answer: dict[str, Any], sent_at: float) -> None:
        """This lease rode in another lease's batch: its answer counts as this run's renewal."""
        if answer.get("status") == 200:
            self._renewed(answer, sent_at)
        else:
            code = answer.get("code")
            self._lose_lease(code if isinstance(code, str) else "409")
        self._wake.set()  # the loop measures its wait again

    def _renewed(self, answer: dict[str, Any], sent_at: float) -> None:
        ttl_ms = answer.get("lease_ttl_ms")
        if isinstance(ttl_ms, int) and not isinstance(ttl_ms, bool) and ttl_ms > 0:
            self._ttl_s = ttl_ms / 1000
        self._last_sent = max(self._last_sent, sent_at)
        self._deadline = sent_at + self._ttl_s
        self._next_at = sent_at + self._ttl_s * self._renew_fraction
        if answer.get("cancel_requested") is True and not self._cancel_requested:
            log.info("task %s: cancel requested; stopping it", self.assignment.task_id)
            self._cancel_requested = True
            self.control.stop("cancel_requested")

    async def _renew(self) -> None:
        """The renewal task. A crash here is logged and ends renewal, not the run."""
        self._renewals.hold(self)
        try:
            await self._renew_loop()  # the coroutine is made here, so a task cancelled early leaks none
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("renewal of %s crashed", self.assignment.lease_id)
        finally:
            self._renewals.release(self)

    async def _sleep_within_lease(self, seconds: float) -> None:
        clock = self._clock
        wait = min(clock() + seconds, self._deadline) - clock()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _until_due(self) -> None:
        """Until the next renewal is due: the periodic one, or an early one a step change asked
        for, no sooner than EARLY_RENEW_MIN_GAP_S after the previous renewal (this run's own, or
        one it rode along in). Each wait is measured once on the clock (tests may hold it still)."""
        clock = self._clock
        while not self._step_dirty:
            wait = min(self._next_at, self._deadline) - clock()
            if wait <= 0:
                return
            self._wake.clear()
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()  # a step change, or a batch this lease rode in
            except TimeoutError:
                return  # the periodic renewal is due
            if self._lease_lost is not None:
                return
        await self._sleep_within_lease(min(self._next_at, self._last_sent + EARLY_RENEW_MIN_GAP_S) - clock())

    async def _renew_loop(self) -> None:
        clock = self._clock
        assignment = self.assignment
        self._next_at = clock() + self._ttl_s * self._renew_fraction
        # Retries after a failed renewal must fit well inside the lease.
        backoff = self._retry.backoff(
            base_s=min(self._retry.base_s, self._ttl_s / 10), cap_s=self._ttl_s * self._renew_fraction
        )
        sent_at = clock()  # of the latest try; set again by every one

        async def renew() -> dict[str, Any]:
            nonlocal sent_at
            sent_at = self._last_sent = clock()
            if sent_at >= self._deadline:
                raise _DeadlinePassed("local lease deadline passed")
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
                async with asyncio.timeout(self._deadline - sent_at):
                    return await self._renewals.renew(self)
            except TimeoutError:
                raise _DeadlinePassed("local lease deadline passed during renewal") from None

        while True:
            await self._until_due()
            if self._lease_lost is not None:  # refused in a batch this lease rode in
                return
            try:
                # Any other failure (no answer, 5xx, a 4xx other than 401/409) may pass: retry
                # while the lease lasts.
                answer = await retry(
                    renew,
                    backoff,
                    what=f"renewal of lease {assignment.lease_id}",
                    retry_on=ProtocolError,
                    stop_on=(Conflict, Unauthorized),
                    sleep=self._sleep_within_lease,
                )
            except _DeadlinePassed as exc:
                self._lose_lease(str(exc))
                return
            except Conflict as exc:
                self._lose_lease(exc.code or "409")
                return
            except Unauthorized:
                self._lose_lease("401")
                self._on_unauthorized()
                return
            self._renewed(answer, sent_at)

    def _lose_lease(self, reason: str) -> None:
        if self._lease_lost is None:
            self._lease_lost = reason
            log.warning("task %s attempt %d: lease lost (%s); stopping it", self.assignment.task_id,
                        self.assignment.attempt, reason)
        self.control.stop("lease_lost")

    # -- result ------------------------------------------------------------------------------

    async def _report(self, outcome: Outcome) -> None:
        """Send the terminal result until the coordinator answers it (200, or 409: give up)."""
        await report_result(self._client, self.assignment, outcome, self._retry,
                            on_unauthorized=self._on_unauthorized, next_wanted=self._next_wanted,
                            on_next=self._on_next, clock=self._clock)


def _step_of(progress: Progress | None) -> tuple[int, str] | None:
    """What makes a renewal come early when it changes: the step and its status."""
    return None if progress is None else (int(progress.step_index), str(progress.status))
