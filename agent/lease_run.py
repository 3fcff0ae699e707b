"""The life of one claimed assignment under its lease, from claim receipt to result.

- The run waits for its device (one assignment per device at a time; the ``HostAgent`` hands it
  the device's lock), then runs the ``Executor``, and reports the outcome until the coordinator
  answers (``200``, or a ``409`` which means give up).
- Renewal starts at once, so the lease is kept while the run still waits for its device: every
  ``lease_ttl_ms * renew_fraction``, carrying the latest progress. A ``409``, or the local lease
  deadline (claim receipt + ``lease_ttl_ms``, moved on by each successful renewal) passing
  without a renewal, stops the run and nothing is reported: the lease is no longer ours.
  ``cancel_requested`` stops the run and it reports ``cancelled``.

A ``401`` on renewal or report means the host credential is gone: the run tells the agent
(``on_unauthorized``), which shuts down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.client import Assignment, Conflict, HostClient, ProtocolError, TransientError, Unauthorized
from agent.retry import Backoff
from agent.runtime.base import Outcome, Progress, RunControl

if TYPE_CHECKING:  # agent.host imports this module; the seam is only needed for type hints
    from agent.host import Executor

log = logging.getLogger("agent.lease_run")

PROGRESS_SUMMARY_MAX_CHARS = 500  # the coordinator bounds it too; this keeps requests small


def progress_body(progress: Progress | None) -> dict[str, Any] | None:
    """The bounded progress of a renewal: step index, status and short text, nothing else."""
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
    the run then reports ``failed``/``device_not_found`` and does nothing else. ``control`` is
    public so the agent can stop the run at shutdown; what the runtime then returns is reported.
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
        backoff_base_s: float,
        backoff_cap_s: float,
        rng: Callable[[], float],
        on_unauthorized: Callable[[], None],
    ) -> None:
        self.assignment = assignment
        self.control = RunControl()
        self._client = client
        self._executor = executor
        self._device_lock = device_lock
        self._renew_fraction = renew_fraction
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._rng = rng
        self._on_unauthorized = on_unauthorized
        # Event-loop time by which a renewal must have succeeded; each renewal moves it on.
        self._deadline = received_at + assignment.lease_ttl_ms / 1000
        self._lease_lost: str | None = None
        self._cancel_requested = False

    async def run(self) -> None:
        assignment = self.assignment
        lock = self._device_lock
        if lock is None:
            log.error("task %s names device %s which this host does not have", assignment.task_id, assignment.device_id)
            await self._report(Outcome("failed", "device_not_found"))
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
            if outcome is None:
                log.warning("task %s never started (%s); its lease will lapse", assignment.task_id, self.control.stop_reason)
                return
            if self._cancel_requested:
                # The operator's cancel wins, even over a run that finished while it stopped;
                # what the runner itself said stays visible in the metadata.
                outcome = Outcome(
                    "cancelled", "cancel_requested", {**outcome.metadata, "runner_status": outcome.status}
                )
            await self._report(outcome)
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)

    async def _execute(self) -> Outcome:
        assignment = self.assignment
        try:
            outcome = await self._executor.run(assignment, self.control)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("task %s: the runtime raised", assignment.task_id)
            return Outcome("failed", "agent_error", {"error": type(exc).__name__})
        log.info(
            "task %s attempt %d finished: %s%s",
            assignment.task_id,
            assignment.attempt,
            outcome.status,
            f" ({outcome.failure_reason})" if outcome.failure_reason else "",
        )
        return outcome

    # -- renewal -----------------------------------------------------------------------------

    async def _renew(self) -> None:
        """The renewal task. A crash here is logged and ends renewal, not the run."""
        try:
            await self._renew_loop()  # the coroutine is made here, so a task cancelled early leaks none
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("renewal of %s crashed", self.assignment.lease_id)

    async def _renew_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assignment = self.assignment
        ttl_s = assignment.lease_ttl_ms / 1000
        next_at = loop.time() + ttl_s * self._renew_fraction
        # Retries after a failed renewal must fit well inside the lease.
        backoff = Backoff(min(self._backoff_base_s, ttl_s / 10), ttl_s * self._renew_fraction, self._rng)
        while True:
            wait = min(next_at, self._deadline) - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            sent_at = loop.time()
            if sent_at >= self._deadline:
                self._lose_lease("local lease deadline passed")
                return
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
                async with asyncio.timeout(self._deadline - sent_at):
                    answer = await self._client.renew(
                        assignment.lease_id,
                        task_id=assignment.task_id,
                        attempt=assignment.attempt,
                        progress=progress_body(self.control.latest),
                    )
            except TimeoutError:
                self._lose_lease("local lease deadline passed during renewal")
                return
            except Conflict as exc:
                self._lose_lease(exc.code or "409")
                return
            except Unauthorized:
                self._lose_lease("401")
                self._on_unauthorized()
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
            self._deadline = sent_at + ttl_s
            next_at = sent_at + ttl_s * self._renew_fraction
            if answer.get("cancel_requested") is True and not self._cancel_requested:
                log.info("task %s: cancel requested; stopping it", assignment.task_id)
                self._cancel_requested = True
                self.control.stop("cancel_requested")

    def _lose_lease(self, reason: str) -> None:
        if self._lease_lost is None:
            self._lease_lost = reason
            log.warning(
                "task %s attempt %d: lease lost (%s); stopping it", self.assignment.task_id, self.assignment.attempt, reason
            )
        self.control.stop("lease_lost")

    # -- result ------------------------------------------------------------------------------

    async def _report(self, outcome: Outcome) -> None:
        """Send the terminal result until the coordinator answers it (200, or 409: give up)."""
        assignment = self.assignment
        backoff = Backoff(self._backoff_base_s, self._backoff_cap_s, self._rng)
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
                self._on_unauthorized()
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
