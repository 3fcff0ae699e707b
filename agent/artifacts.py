"""A run's evidence, uploaded beside it: step screenshots, the final screen of a failed run, and
the run's log (PROTOCOL.md, ``PUT .../leases/{lease_id}/artifacts/{name}``).

``HOST_AGENT_ARTIFACTS`` decides what goes up:

- ``all`` (default): each device step's screen as ``step-NNN.png`` with its ``step_index``, the
  final screen of a failed run as ``final.png``, and the run's log as ``log.txt`` at the end;
- ``failures``: nothing while the run goes well (no screen is even taken); a failed run's
  ``final.png`` and ``log.txt``;
- ``off``: nothing.

Uploads never fail, delay or stop the run, and never hold up its renewal: a screen is queued
(bounded: past ``MAX_PENDING`` items or ``MAX_PENDING_BYTES`` it is dropped with a log line) and
one background task per run sends the queue in order, each upload tried ``UPLOAD_TRIES`` times
with ``agent/retry.py``'s jittered backoff after a failure without a definite answer, then given
up with one log line; a definite refusal (a 4xx: the lease is gone, a cap) is given up at once.

The order against the result: the coordinator accepts an upload only while the lease is
current, and the result ends the lease. So the run, once it has ended, queues its log and waits
for the queue to empty for at most ``drain_s`` (a few seconds; renewal still runs meanwhile), then
gives up what is left and reports regardless.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import Enum

from agent.answers import Assignment, ProtocolError, TransientError
from agent.client import HostClient
from agent.retry import RetryPolicy
from agent.run_log import RunLog
from agent.runtime import DEVICE_GONE, DEVICE_LOST, DEVICE_UNAVAILABLE, Driver, Outcome
from wire import ResultStatus

log = logging.getLogger("agent.artifacts")

PNG = "image/png"
TEXT = "text/plain; charset=utf-8"
LOG_NAME = "log.txt"
FINAL_NAME = "final.png"
UPLOAD_TRIES = 3
RETRY_CAP_S = 2.0  # between two tries of one upload: the whole drain is only a few seconds
SCREENSHOT_TIMEOUT_S = 5.0  # a wedged device costs the run at most this per screen
MAX_PENDING = 64
MAX_PENDING_BYTES = 32 * 1024 * 1024
DRAIN_S = 5.0
# A failed run whose device is gone has no screen left to take.
_NO_SCREEN = frozenset({DEVICE_GONE, DEVICE_LOST, DEVICE_UNAVAILABLE})


class ArtifactMode(str, Enum):
    OFF = "off"
    FAILURES = "failures"
    ALL = "all"


def step_name(step_index: int) -> str:
    return f"step-{step_index:03d}.png"


@dataclass(frozen=True)
class _Upload:
    name: str
    content: bytes
    content_type: str
    step_index: int | None = None


class RunArtifacts:
    """The evidence of one run (a ``RunEvidence`` for its ``RunControl``): screens are taken and
    queued as the run goes, ``finish`` queues the log and drains the queue briefly."""

    def __init__(
        self,
        client: HostClient,
        assignment: Assignment,
        mode: ArtifactMode,
        retry_policy: RetryPolicy,
        *,
        drain_s: float = DRAIN_S,
    ) -> None:
        self._client = client
        self._assignment = assignment
        self.mode = ArtifactMode(mode)
        self._retry = retry_policy
        self._drain_s = drain_s
        self._queue: asyncio.Queue[_Upload] = asyncio.Queue()
        self._pending_bytes = 0
        self._sender: asyncio.Task[None] | None = None
        self.log = RunLog(
            f"tether agent log of task {assignment.task_id} attempt {assignment.attempt} "
            f"on device {assignment.device_id} (lease {assignment.lease_id})"
        )
        # What became of each upload, by name: "stored", "dropped", "given_up" (tests and logs).
        self.outcomes: dict[str, str] = {}

    # -- RunEvidence -------------------------------------------------------------------------

    async def after_step(self, step_index: int, driver: Driver) -> None:
        if self.mode != ArtifactMode.ALL:
            return
        shot = await self._screen(driver, f"step {step_index}")
        if shot is not None:
            self._enqueue(_Upload(step_name(step_index), shot, PNG, step_index))

    async def after_run(self, outcome: Outcome, driver: Driver) -> None:
        if self.mode == ArtifactMode.OFF or outcome.status != ResultStatus.FAILED:
            return
        if outcome.failure_reason in _NO_SCREEN:
            return
        shot = await self._screen(driver, "final screen")
        if shot is not None:
            self._enqueue(_Upload(FINAL_NAME, shot, PNG))

    # -- the end of the run ------------------------------------------------------------------

    async def finish(self, outcome: Outcome | None) -> None:
        """Queue the log (when this mode keeps it for ``outcome``), then wait at most
        ``drain_s`` for the queue; whatever is still pending after that is given up."""
        failed = outcome is not None and outcome.status == ResultStatus.FAILED
        if self.mode == ArtifactMode.ALL or (self.mode == ArtifactMode.FAILURES and failed):
            if outcome is not None:
                reason = f" ({outcome.failure_reason})" if outcome.failure_reason else ""
                self.log.add(f"run ended: {outcome.status.value}{reason}")
            self._enqueue(_Upload(LOG_NAME, self.log.text(), TEXT))
        if self._sender is None:
            return
        try:
            async with asyncio.timeout(self._drain_s):
                await self._queue.join()
        except TimeoutError:
            left = self._queue.qsize() + 1  # the one being sent, and those behind it
            log.warning("task %s: %d artifact upload(s) not done after %.1fs; giving them up and "
                        "reporting the result", self._assignment.task_id, left, self._drain_s)
        await self.abandon()

    async def abandon(self) -> None:
        """Stop sending (the lease is gone, or the drain is over); nothing pending goes up."""
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        while not self._queue.empty():
            self.outcomes[self._queue.get_nowait().name] = "given_up"

    # -- inside ------------------------------------------------------------------------------

    async def _screen(self, driver: Driver, what: str) -> bytes | None:
        """The device's screen now, or None (logged) when it cannot be had soon: evidence is
        worth a few seconds of a run, not its failure."""
        try:
            async with asyncio.timeout(SCREENSHOT_TIMEOUT_S):
                return await driver.screenshot()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the driver raises, the run goes on without it
            log.warning("task %s: no screenshot of the %s (%s)", self._assignment.task_id, what,
                        str(exc)[:200] or type(exc).__name__)
            return None

    def _enqueue(self, upload: _Upload) -> None:
        size = len(upload.content)
        if self._queue.qsize() >= MAX_PENDING or self._pending_bytes + size > MAX_PENDING_BYTES:
            self.outcomes[upload.name] = "dropped"
            log.warning("task %s: %s not uploaded: %d upload(s) already waiting", self._assignment.task_id,
                        upload.name, self._queue.qsize())
            return
        self._pending_bytes += size
        self._queue.put_nowait(upload)
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_all())

    async def _send_all(self) -> None:
        while True:
            upload = await self._queue.get()
            try:
                self.outcomes[upload.name] = await self._send(upload)
            except asyncio.CancelledError:
                self.outcomes[upload.name] = "given_up"
                raise
            except Exception:  # a bug here must cost an artifact, never the run
                log.exception("task %s: uploading %s crashed", self._assignment.task_id, upload.name)
                self.outcomes[upload.name] = "given_up"
            finally:
                self._pending_bytes -= len(upload.content)
                self._queue.task_done()

    async def _send(self, upload: _Upload) -> str:
        assignment = self._assignment
        backoff = self._retry.backoff(cap_s=min(self._retry.cap_s, RETRY_CAP_S))
        for attempt in range(1, UPLOAD_TRIES + 1):
            try:
                await self._client.upload_artifact(
                    assignment.lease_id, upload.name, upload.content, content_type=upload.content_type,
                    task_id=assignment.task_id, attempt=assignment.attempt, step_index=upload.step_index,
                )
                return "stored"
            except TransientError as exc:
                if attempt == UPLOAD_TRIES:
                    log.warning("task %s: giving up uploading %s after %d tries (%s)", assignment.task_id,
                                upload.name, attempt, exc)
                    return "given_up"
                delay = backoff.next_delay()
                log.info("task %s: uploading %s failed (%s); try %d in %.2fs", assignment.task_id,
                         upload.name, exc, attempt + 1, delay)
                await asyncio.sleep(delay)
            except ProtocolError as exc:  # a definite answer (lease gone, a cap, ...): the same again
                log.warning("task %s: %s refused (%s); not uploading it", assignment.task_id, upload.name, exc)
                return "given_up"
        raise AssertionError("unreachable")
