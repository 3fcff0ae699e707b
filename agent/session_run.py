"""A live session's command loop, once its ``LeasedRun`` holds the device (PROTOCOL.md, "Live
sessions").

The loop long-polls ``POST .../leases/{lease_id}/commands``: each poll delivers the answers of
the commands run since the last one and brings the next commands, which run one at a time, in
order, with the device's driver (``agent/runtime/session.py``). An observed command's screen is
uploaded as the artifact ``screen-<command_id>.png`` before its answer is delivered, as the
contract asks; an upload that fails leaves the answer without a screen, never without an answer.

Renewal: every poll renews the lease, so the polls keep it. Each poll's answer counts as the
lease's renewal (``renewed``: it moves the ``LeasedRun``'s renewal schedule on), and a poll waits
under half the renewal interval, so the periodic renewal never comes due while the loop polls. It
stays as the backstop for a command that runs longer (a long ``wait``, a slow device): the lease
never depends on how long an action takes, and the lease deadline is judged in one place.

How it ends (the ``Outcome``, which the ``LeasedRun`` reports, or not):
- ``end_requested``: ``succeeded`` with ``metadata.end_reason`` (the coordinator's
  ``end_reason``, ``ended`` when it gives none);
- ``cancel_requested`` (in a poll's answer or a renewal's): ``cancelled``;
- the agent shutting down (``control`` stopped with ``SHUTDOWN``): the answers not yet delivered
  go in one last poll that does not wait, and the run is reported as any run the shutdown
  stopped (``failed``, ``shutdown``; a session has one attempt, so it ends there);
- the device lost (adb says so), gone or unreachable: the command answers ``failed``, and the
  session ends ``failed`` (``device_lost``, ``device_gone``, ``device_unavailable``);
- a ``409`` on a poll: the lease is no longer ours (``lost``), nothing is reported.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

from agent.answers import Assignment, Conflict, ProtocolError, Rejected, TransientError, Unauthorized
from agent.client import HostClient
from agent.retry import RetryPolicy, retry
from agent.runtime import (
    DEVICE_LOST,
    DEVICE_UNAVAILABLE,
    SHUTDOWN,
    CommandAnswer,
    DeviceLost,
    Driver,
    Outcome,
    RunControl,
    perform_command,
)
from wire import ResultStatus, TaskKind

log = logging.getLogger("agent.session_run")

# The task kind of a live session (the claim's ``"kind"``).
SESSION_KIND = TaskKind.SESSION.value
END_REASON_DEFAULT = "ended"
# The most a poll waits at the coordinator (its own cap is larger); less when the lease is short.
POLL_WAIT_MAX_S = 25
_REFUSED = "commands_refused"  # a poll answered with a 4xx other than 401 and 409
_NOT_AN_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9._-]")

Renewed = Callable[[dict[str, Any], float], None]


def screen_name(command_id: str) -> str:
    """The artifact a command's screen is uploaded as: ``screen-<command_id>.png`` (an id's
    ``:``, which artifact names do not take, becomes ``_``)."""
    return f"screen-{_NOT_AN_ARTIFACT_NAME.sub('_', command_id)}.png"


def poll_wait_s(lease_ttl_ms: int, renew_fraction: float) -> int:
    """How long a poll may wait: under half the renewal interval, so the polls, not the periodic
    renewal, keep the lease (a poll renews when it arrives, but the agent learns so only from
    its answer, one wait later, while the next poll is out); at least a second, so an idle loop
    never spins."""
    interval_s = lease_ttl_ms / 1000 * renew_fraction
    return max(1, min(POLL_WAIT_MAX_S, int((interval_s - 1) / 2)))


class SessionRun:
    """The command loop of one session assignment; ``run()`` returns its ``Outcome``.

    ``renewed(answer, sent_at)`` is told each poll's answer (it renewed the lease), ``lost(code)``
    a 409, ``unauthorized()`` a 401; ``clock`` is the ``LeasedRun``'s."""

    def __init__(
        self,
        assignment: Assignment,
        *,
        client: HostClient,
        driver: Driver,
        control: RunControl,
        retry_policy: RetryPolicy,
        renewed: Renewed,
        lost: Callable[[str], None],
        unauthorized: Callable[[], None],
        clock: Callable[[], float],
        wait_s: int,
    ) -> None:
        self.assignment = assignment
        self._client = client
        self._driver = driver
        self._control = control
        self._retry = retry_policy
        self._renewed = renewed
        self._lost = lost
        self._unauthorized = unauthorized
        self._clock = clock
        self._wait_s = wait_s
        self._pending: list[dict[str, Any]] = []  # answers not delivered yet
        self.commands_run = 0

    async def run(self) -> Outcome:
        assignment = self.assignment
        if not self._driver.online:
            log.warning("session %s: device %s is not reachable", assignment.task_id, assignment.device_id)
            return Outcome(ResultStatus.FAILED, DEVICE_UNAVAILABLE, {"device_id": assignment.device_id})
        log.info("session %s on device %s: taking commands", assignment.task_id, assignment.device_id)
        while True:
            reply = await self._poll(self._wait_s)
            if reply is None:  # stopped (lease lost, cancel, shutdown) or refused
                return await self._stopped()
            if reply.get("end_requested") is True:
                reason = reply.get("end_reason")
                reason = reason if isinstance(reason, str) and reason else END_REASON_DEFAULT
                log.info("session %s ended (%s) after %d command(s)", assignment.task_id, reason, self.commands_run)
                return Outcome(ResultStatus.SUCCEEDED, None, {"end_reason": reason, "commands": self.commands_run})
            if reply.get("cancel_requested") is True or self._control.stopped:
                return await self._stopped()
            for command in reply.get("commands") or []:
                if self._control.stopped:
                    break  # the rest are not run; the coordinator ends the session anyway
                try:
                    await self._run_command(command)
                except DeviceLost as exc:
                    log.error("session %s: device %s lost (%s)", assignment.task_id, assignment.device_id, exc)
                    await self._poll(0)  # deliver the failed answer before the result ends the lease
                    return Outcome(ResultStatus.FAILED, DEVICE_LOST, {"device_id": assignment.device_id,
                                                                     "commands": self.commands_run})

    async def _stopped(self) -> Outcome:
        """The outcome of a loop its control stopped: what ``LeasedRun`` makes of a stopped run
        (a cancel wins; a shutdown is a failure; a lost lease reports nothing)."""
        if self._pending and self._control.stop_reason == SHUTDOWN:
            await self._poll(0, stoppable=False)  # the answers already earned still go out
        reason = self._control.stop_reason or "stopped"
        # A stop from outside (a cancel, the shutdown, the lease lost) is the LeasedRun's to
        # judge, as for any stopped run; a refused poll is this loop's failure.
        status = ResultStatus.FAILED if reason == _REFUSED else ResultStatus.CANCELLED
        return Outcome(status, reason, {"commands": self.commands_run})

    async def _run_command(self, command: Any) -> None:
        command_id = command.get("command_id") if isinstance(command, dict) else None
        if not isinstance(command_id, str) or not command_id:
            log.warning("session %s: a command without a command_id; skipped", self.assignment.task_id)
            return
        self.commands_run += 1
        try:
            answer = await perform_command(self._driver, command.get("action"), self._control)
        except DeviceLost:
            self._pending.append({"command_id": command_id, "status": "failed", "error": "the device was lost",
                                  "duration_ms": 0, "observation": None})
            raise
        self._pending.append(await self._answer_body(command_id, answer))

    async def _answer_body(self, command_id: str, answer: CommandAnswer) -> dict[str, Any]:
        observation: dict[str, Any] | None = None
        if answer.screen is not None:
            name = await self._upload(screen_name(command_id), answer.screen)
            observation = {"screen": name, "width": answer.width, "height": answer.height,
                           "elements": answer.elements}
        return {"command_id": command_id, "status": answer.status, "error": answer.error,
                "duration_ms": answer.duration_ms, "observation": observation}

    async def _upload(self, name: str, png: bytes) -> str | None:
        """The screen, uploaded (a few tries); its name, or None when it did not go up."""
        assignment = self.assignment

        async def put() -> Any:
            return await self._client.upload_artifact(assignment.lease_id, name, png, content_type="image/png",
                                                      task_id=assignment.task_id, attempt=assignment.attempt)

        backoff = self._retry.backoff(cap_s=1.0)
        for _ in range(3):
            try:
                await put()
                return name
            except TransientError as exc:
                log.warning("session %s: upload of %s failed (%s)", assignment.task_id, name, exc)
                await asyncio.sleep(backoff.next_delay())
            except ProtocolError as exc:  # a cap, a conflict, an ended lease: trying again won't help
                log.warning("session %s: upload of %s refused (%s)", assignment.task_id, name, exc)
                return None
        return None

    async def _poll(self, wait_s: int, *, stoppable: bool = True) -> dict[str, Any] | None:
        """One poll, retried while it gets no answer, delivering the pending answers; None when
        the loop must stop (the control stopped meanwhile, a 409, a 401, a refusal)."""
        assignment = self.assignment
        sent_at = self._clock()

        async def send() -> dict[str, Any]:
            nonlocal sent_at
            sent_at = self._clock()
            return await self._client.poll_commands(assignment.lease_id, task_id=assignment.task_id,
                                                    attempt=assignment.attempt, answers=list(self._pending),
                                                    wait_s=wait_s)

        call = retry(send, self._retry.backoff(), what=f"commands poll of session {assignment.task_id}")
        try:
            if stoppable:
                reply = await _unless_stopped(call, self._control)
                if reply is None:
                    return None
            else:
                reply = await call
        except Conflict as exc:
            self._lost(exc.code or "409")
            return None
        except Unauthorized:
            self._lost("401")
            self._unauthorized()
            return None
        except (Rejected, ProtocolError) as exc:
            log.error("session %s: commands poll refused (%s); ending the loop", assignment.task_id, exc)
            self._control.stop(_REFUSED)
            return None
        self._pending.clear()  # delivered: the coordinator keeps the first answer of each
        self._renewed(reply, sent_at)
        return reply


async def _unless_stopped(call: Any, control: RunControl) -> dict[str, Any] | None:
    """``call``'s answer, or None (the call cancelled) once ``control`` stops first."""
    poll = asyncio.ensure_future(call)
    stopped = asyncio.ensure_future(control.wait_stopped())
    try:
        await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if poll.done():
        result: dict[str, Any] = poll.result()
        return result
    poll.cancel()
    await asyncio.gather(poll, return_exceptions=True)
    return None
