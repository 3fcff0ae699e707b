"""A run's terminal result, sent until the coordinator answers it (``200``, or a ``409``: give
up), and the next assignment eager dispatch hands back in the answer (``agent/lease_run.py``
says when it is asked for)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent.answers import Assignment, Conflict, MalformedAnswer, ProtocolError, Unauthorized
from agent.client import HostClient
from agent.retry import RetryPolicy, retry
from agent.runtime import Outcome

# The lines of a run's report are the run's: logged as lease_run's.
log = logging.getLogger("agent.lease_run")


async def report_result(client: HostClient, assignment: Assignment, outcome: Outcome, retry_policy: RetryPolicy, *,
                        on_unauthorized: Callable[[], None], next_wanted: Callable[[], bool],
                        on_next: Callable[[Assignment, float], None] | None, clock: Callable[[], float]) -> None:
    """Send the terminal result until the coordinator answers it (200, or 409: give up)."""
    # Eager dispatch, asked unless the agent is stopping: decided at the first try that asks,
    # and asked again by every retry after it, so a next assignment dispatched for an answer
    # that was lost comes back with the replay (and is stopped at once if the agent is
    # stopping by then) rather than waiting out its lease.
    asked = False

    async def send() -> Any:
        nonlocal asked
        asked = asked or (on_next is not None and not outcome.retryable and next_wanted())
        # The identical report every time: the coordinator treats a repeat as a replay.
        return await client.report_result(
            task_id=assignment.task_id,
            attempt=assignment.attempt,
            lease_id=assignment.lease_id,
            status=outcome.status,
            failure_reason=outcome.failure_reason,
            metadata=dict(outcome.metadata),
            retryable=outcome.retryable,
            next_wanted=asked,
        )

    try:
        answer = await retry(send, retry_policy.backoff(), what=f"result for task {assignment.task_id}")
    except Conflict as exc:
        log.warning("result for task %s refused (%s); giving up", assignment.task_id, exc.code)
        return
    except Unauthorized:
        on_unauthorized()
        return
    except ProtocolError as exc:
        log.error("result for task %s rejected (%s); giving up", assignment.task_id, exc)
        return
    replayed = isinstance(answer, dict) and answer.get("replayed") is True
    task_status = answer.get("task_status") if isinstance(answer, dict) else None
    log.info(
        "reported task %s attempt %d: %s%s%s%s%s",
        assignment.task_id,
        assignment.attempt,
        outcome.status.value,
        f" ({outcome.failure_reason})" if outcome.failure_reason else "",
        ", retryable" if outcome.retryable else "",
        " (replayed)" if replayed else "",
        # What the task became: "queued" means the coordinator will run it again.
        f"; task is now {task_status}" if isinstance(task_status, str) else "",
    )
    following = answer.get("next_assignment") if isinstance(answer, dict) else None
    if following is not None and on_next is not None:
        try:
            after = Assignment.from_wire(following)
        except MalformedAnswer as exc:
            # Its lease lapses and the coordinator requeues it: nothing here may run it.
            log.error("result for task %s: next assignment malformed (%s)", assignment.task_id, exc)
            return
        on_next(after, clock())

