"""The checker: whether a finished history kept the protocol's promises (``check``), and the
assertion a test makes of it (``verify``).

What the checker verifies, and how each is decided:

(a) ``unfinished``: every acknowledged create (a 2xx with a ``task_id``) has a final read
    (``GET /api/v1/tasks/{id}``, the latest answered one) and that read is terminal. A task read
    terminal is never read non-terminal by a read invoked after that answer.
(b) ``two_results``: results recorded (``200`` with ``replayed: false``) of one task are for
    distinct attempts, and every one but the latest attempt's requeued the task (``task_status:
    queued``, a retryable failure); a terminal one agrees with the task's final read.
An assignment a result's answer carries (``next_assignment``, eager dispatch) is handed out as a
claim's is, and is checked as one in (c), (d) and (e).

(c) ``stale_accepted``: no renewal, result (first recording) or claim replay of attempt ``a`` is
    accepted when it was invoked after an answer handing out a newer attempt of the task had
    left the coordinator. Overlapping operations are undecided and not flagged. An attempt is
    handed out under one lease only (``attempt_reissued`` otherwise).
(d) ``device_overlap``: for each lease, the interval during which the coordinator certainly
    held it live: from the time its claim answer was received (the lease was granted by then)
    to the latest invocation of an operation accepted on it (renewal, first result recording,
    claim replay: the lease was still live at some moment after that invocation), and leases
    never revive, so it was live throughout. A lease with no operation accepted after its
    claim's answer has no such interval (it may have expired before that answer arrived), but
    it was live at the moment it was granted, somewhere between its claim's invocation and
    answer. Two leases of one device are flagged when their intervals meet, or when one was
    granted within the other's interval. A lease that expired and whose agent stopped has no
    accepted operation after its last renewal, so its interval ends there and never reaches a
    later lease's claim; nothing legitimate is flagged.
(e) ``replay_mismatch``: the answers to one ``claim_id`` that hand out an assignment hand out the
    same one (task, attempt, lease, device), and so do the answers to one identical result report
    asking for its device's next (eager dispatch: ``next_assignment``, or null once that lease
    ended; a replayed result never hands out a second lease); the answers to an identical result report, and to
    creates with one idempotency key, equal the first answer that left the coordinator before
    they were sent (status code, and the fields that must not change: ids, attempt, status,
    ``recorded_at``, error code).
(f) ``order_inverted``: placement kept the order of PROTOCOL's "Sharing the fleet" (priority, and
    FIFO within a team) wherever the tasks' own histories, read at the end, decide it
    (``tests/history/order.py`` says how).

Answers the proxy lost on purpose still count: the coordinator gave them, the proxy saw them.
An answer of 5xx is "try again" and is compared with nothing.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.history.order import check_order
from tests.history.records import TERMINAL, History, Op


@dataclass(frozen=True)
class Violation:
    kind: str  # unfinished, two_results, stale_accepted, attempt_reissued, device_overlap, replay_mismatch,
    # order_inverted
    message: str
    ops: tuple[int, ...] = ()


@dataclass
class Report:
    operations: int
    answered: int
    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # what was checked: creates, leases, replays...

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def describe(self, ops: Sequence[Op], limit: int = 20) -> str:
        by_index = {op.index: op for op in ops}
        lines = [f"{len(self.violations)} violation(s) in {self.operations} operations ({self.counts}):"]
        for violation in self.violations[:limit]:
            lines.append(f"- {violation.kind}: {violation.message}")
            lines += [f"    {by_index[i].short()}" for i in violation.ops if i in by_index]
        return "\n".join(lines)


def _segments(op: Op) -> list[str]:
    return op.path.strip("/").split("/")


def _is_create(op: Op) -> bool:
    return op.method == "POST" and op.path.rstrip("/") == "/api/v1/tasks"


def _read_task_id(op: Op) -> str | None:
    parts = _segments(op)
    if op.method == "GET" and len(parts) == 4 and parts[:3] == ["api", "v1", "tasks"]:
        return parts[3]
    return None


def _host_call(op: Op, *tail: str) -> bool:
    parts = _segments(op)
    return (op.method == "POST" and len(parts) == 4 + len(tail) and parts[:3] == ["internal", "v1", "hosts"]
            and all(want in ("*", got) for want, got in zip(tail, parts[4:], strict=True)))


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else None


def _error_code(op: Op) -> Any:
    return _field(_field(op.body, "error"), "code")


@dataclass
class _Lease:
    lease_id: str
    task_id: str
    attempt: int
    device_id: Any
    granted: float  # its first claim answer left the coordinator by then
    live_until: float  # accepted on it after an invocation at this time
    ops: list[int]
    asked: float = 0.0  # its first claim was invoked then: it was granted, so live, after this

    def certainly_live(self) -> tuple[float, float] | None:
        """From its claim's answer to the latest call accepted on it; leases never revive. None when
        no call was accepted after that answer: it may have ended before the answer arrived."""
        return (self.granted, self.live_until) if self.live_until > self.granted else None

    def overlaps(self, other: _Lease) -> bool:
        """Whether both were certainly live at one moment: their certain intervals meet, or the
        other was granted (and so live) at a moment within this one's certain interval."""
        mine, theirs = self.certainly_live(), other.certainly_live()
        if mine is None:
            return False
        if mine[0] <= other.asked and other.granted <= mine[1]:
            return True
        return theirs is not None and max(mine[0], theirs[0]) < min(mine[1], theirs[1])


def check(ops: Iterable[Op]) -> Report:
    """Check ``ops`` (one test's history, finished) against the promises (a)-(f) above."""
    ops = sorted(ops, key=lambda op: op.index)
    by_index = {op.index: op for op in ops}
    report = Report(operations=len(ops), answered=sum(op.answered for op in ops))
    violations = report.violations
    creates = [op for op in ops if _is_create(op)]
    claims = [op for op in ops if _host_call(op, "claim")]
    renewals = [op for op in ops if _host_call(op, "leases", "*", "renew")]
    batches = [op for op in ops if _host_call(op, "renewals") and op.status == 200]
    results = [op for op in ops if _host_call(op, "results")]
    reads = [op for op in ops if _read_task_id(op) is not None and op.status == 200]

    # -- (e) replays, gathered first: the answers that hand out assignments feed (c) and (d) ----
    # Each with the assignment it hands out and what a replay of it repeats: its claim id, or its
    # result report (eager dispatch).
    handed: list[tuple[Op, dict[str, Any], tuple[Any, ...]]] = [
        (op, op.body, ("claim", op.side, _field(op.request, "claim_id"))) for op in claims
        if op.status == 200 and isinstance(op.body, dict) and "lease_id" in op.body]
    handed += [(op, op.body["next_assignment"], ("result", op.side, json.dumps(op.request, sort_keys=True)))
               for op in results if op.status == 200 and isinstance(_field(op.body, "next_assignment"), dict)]
    report.counts["eager"] = sum(1 for _, _, source in handed if source[0] == "result")
    by_source: dict[tuple[Any, ...], list[tuple[Op, dict[str, Any]]]] = defaultdict(list)
    for op, assignment, source in handed:
        by_source[source].append((op, assignment))
    for source, answers in by_source.items():
        if source[2] is None:
            continue
        first, first_assignment = min(answers, key=lambda pair: pair[0].responded_at or 0)
        for op, assignment in answers:
            if _assignment(assignment) != _assignment(first_assignment):
                what = f"claim_id {source[2]}" if source[0] == "claim" else "an identical result report"
                violations.append(Violation("replay_mismatch", f"{what} of {source[1]} handed out "
                                            f"{_assignment(assignment)} after {_assignment(first_assignment)}",
                                            (first.index, op.index)))
    report.counts["claim_replays"] = sum(len(a) - 1 for k, a in by_source.items() if k[0] == "claim" and k[2] is not None)

    by_report: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in results:
        by_report[(op.side, json.dumps(op.request, sort_keys=True))].append(op)
    report.counts["result_replays"] = _check_replays(by_report.values(), _result_answer, "identical result report",
                                                     violations)
    by_key: dict[Any, list[Op]] = defaultdict(list)
    for op in creates:
        key = _field(op.request, "idempotency_key")
        if key is not None:
            by_key[key].append(op)
    report.counts["create_replays"] = _check_replays(by_key.values(), _create_answer, "idempotency key",
                                                     violations)
    for key, answers in by_key.items():
        created = [op for op in answers if op.status == 201]
        if len(created) > 1:
            violations.append(Violation("replay_mismatch", f"idempotency key {key} created {len(created)} tasks",
                                        tuple(op.index for op in created)))

    # -- leases: one per handed-out attempt ----------------------------------------------------
    leases: dict[str, _Lease] = {}
    sources: dict[str, tuple[Any, ...]] = {}  # lease id -> what handed it out first
    attempts: dict[tuple[str, int], str] = {}
    for op, body, source in sorted(handed, key=lambda item: item[0].responded_at or 0):
        lease = leases.get(body["lease_id"])
        if lease is None:
            lease = leases[body["lease_id"]] = _Lease(body["lease_id"], body["task_id"], body["attempt"],
                                                     body.get("device_id"), op.responded_at or 0,
                                                     op.responded_at or 0, [op.index], op.invoked_at)
            sources[lease.lease_id] = source
            other = attempts.setdefault((lease.task_id, lease.attempt), lease.lease_id)
            if other != lease.lease_id:
                violations.append(Violation("attempt_reissued", f"task {lease.task_id} attempt {lease.attempt} "
                                            f"handed out under leases {other} and {lease.lease_id}",
                                            (leases[other].ops[0], op.index)))
        else:  # a replay (claim id, or result report): the lease was live when it was served
            if sources[lease.lease_id] != source or source[2] is None:
                violations.append(Violation("attempt_reissued", f"lease {lease.lease_id} handed out twice",
                                            (lease.ops[0], op.index)))
            lease.live_until = max(lease.live_until, op.invoked_at)
            lease.ops.append(op.index)
    report.counts["leases"] = len(leases)

    # Accepted on a lease: renewals answered 200, results recorded now (not replays).
    recorded = [op for op in results if op.status == 200 and _field(op.body, "replayed") is False]
    # (op, lease id, task id, attempt)
    accepted: list[tuple[Op, str, Any, Any]] = [
        (op, _segments(op)[5], _field(op.request, "task_id"), _field(op.request, "attempt"))
        for op in renewals if op.status == 200
    ]
    accepted += [(op, _field(op.request, "lease_id"), _field(op.request, "task_id"), _field(op.request, "attempt"))
                 for op in recorded]
    # A batch renewal: each entry answered 200 is a renewal accepted, as a single one is.
    for op in batches:
        sent, answered = _field(op.request, "leases") or [], _field(op.body, "leases") or []
        accepted += [(op, _field(entry, "lease_id"), _field(entry, "task_id"), _field(entry, "attempt"))
                     for entry, answer in zip(sent, answered, strict=False) if _field(answer, "status") == 200]
    for op, lease_id, _task, _attempt in accepted:
        if lease_id in leases:
            lease = leases[lease_id]
            lease.live_until = max(lease.live_until, op.invoked_at)
            lease.ops.append(op.index)

    # -- (c) nothing accepted for an attempt once a newer one was handed out -------------------
    newer: dict[str, list[_Lease]] = defaultdict(list)
    for lease in leases.values():
        newer[lease.task_id].append(lease)
    replays = [(op, body["lease_id"], body["task_id"], body["attempt"]) for op, body, _ in handed
               if leases[body["lease_id"]].ops[0] != op.index]
    for op, lease_id, task_id, attempt in accepted + replays:
        if not isinstance(attempt, int):
            continue
        for later in newer.get(task_id, []):
            if later.attempt > attempt and later.granted < op.invoked_at:
                violations.append(Violation(
                    "stale_accepted",
                    f"task {task_id} attempt {attempt} (lease {lease_id}) accepted {op.path.rsplit('/', 1)[-1]} "
                    f"invoked after attempt {later.attempt} (lease {later.lease_id}) was handed out",
                    (later.ops[0], op.index)))
                break

    # -- (d) one live lease per device at a time -----------------------------------------------
    by_device: dict[Any, list[_Lease]] = defaultdict(list)
    for lease in leases.values():
        by_device[lease.device_id].append(lease)
    for device_id, held in by_device.items():
        for first in held:
            for second in held:
                if second is first or not first.overlaps(second):
                    continue
                if second.overlaps(first) and second.granted < first.granted:
                    continue  # the pair is reported once, from the earlier grant
                violations.append(Violation(
                    "device_overlap",
                    f"device {device_id}: lease {second.lease_id} (task {second.task_id} attempt "
                    f"{second.attempt}) granted by {second.granted:.3f} while lease {first.lease_id} (task "
                    f"{first.task_id} attempt {first.attempt}) was live until at least {first.live_until:.3f}",
                    (first.ops[0], max(first.ops, key=lambda i: by_index[i].invoked_at),
                     second.ops[0])))

    # -- (b) one recorded result per attempt, and only the last attempt's is terminal -----------
    final = _final_reads(reads)
    per_task: dict[Any, list[Op]] = defaultdict(list)
    for op in recorded:
        per_task[_field(op.request, "task_id")].append(op)
    for task_id, recorded_ops in per_task.items():
        recorded_ops.sort(key=lambda op: (_field(op.request, "attempt") or 0, op.invoked_at))
        attempts_seen = [_field(op.request, "attempt") for op in recorded_ops]
        if len(set(attempts_seen)) != len(attempts_seen):
            violations.append(Violation("two_results", f"task {task_id}: one attempt recorded twice {attempts_seen}",
                                        tuple(op.index for op in recorded_ops)))
        for op in recorded_ops[:-1]:
            if _field(op.body, "task_status") != "queued":
                violations.append(Violation(
                    "two_results", f"task {task_id}: attempt {_field(op.request, 'attempt')} was recorded as "
                    f"{_field(op.body, 'task_status')}, yet a later attempt's result was recorded too",
                    tuple(o.index for o in recorded_ops)))
        last = recorded_ops[-1]
        status = _field(last.body, "task_status")
        read = final.get(task_id)
        if status in TERMINAL and read is not None:
            result = _field(read.body, "result") or {}
            if (_field(read.body, "status"), _field(result, "attempt")) != (status, _field(last.request, "attempt")):
                violations.append(Violation(
                    "two_results", f"task {task_id}: attempt {_field(last.request, 'attempt')} recorded {status}, "
                    f"the task ends {_field(read.body, 'status')} with attempt {_field(result, 'attempt')}'s result",
                    (last.index, read.index)))

    # -- (f) placement in PROTOCOL's order, where the tasks' histories decide it ------------------
    inverted, ordered = check_order(ops)
    report.counts.update(ordered)
    violations += [Violation("order_inverted", message, indexes) for message, indexes in inverted]

    # -- (a) every acknowledged create ends, and stays ended -----------------------------------
    acknowledged: dict[str, Op] = {}
    for op in creates:
        task_id = _field(op.body, "task_id") if op.ok else None
        if isinstance(task_id, str):
            acknowledged.setdefault(task_id, op)
    report.counts["creates_acknowledged"] = len(acknowledged)
    for task_id, op in acknowledged.items():
        read = final.get(task_id)
        if read is None:
            violations.append(Violation("unfinished", f"task {task_id} was created but never read", (op.index,)))
        elif _field(read.body, "status") not in TERMINAL:
            violations.append(Violation("unfinished", f"task {task_id} ends {_field(read.body, 'status')}",
                                        (op.index, read.index)))
    by_task: dict[str, list[Op]] = defaultdict(list)
    for op in reads:
        by_task[_read_task_id(op) or ""].append(op)
    for task_id, task_reads in by_task.items():
        ended = [op for op in task_reads if _field(op.body, "status") in TERMINAL]
        if not ended:
            continue
        first_end = min(ended, key=lambda op: op.responded_at or 0)
        for op in task_reads:
            if op.invoked_at > (first_end.responded_at or 0) and _field(op.body, "status") not in TERMINAL:
                violations.append(Violation("unfinished", f"task {task_id} read {_field(first_end.body, 'status')}, "
                                            f"then {_field(op.body, 'status')}", (first_end.index, op.index)))
    return report


def _final_reads(reads: list[Op]) -> dict[str, Op]:
    final: dict[str, Op] = {}
    for op in sorted(reads, key=lambda op: op.responded_at or 0):
        final[_read_task_id(op) or ""] = op
    return final


def _assignment(body: Any) -> tuple[Any, ...]:
    return tuple(_field(body, name) for name in ("task_id", "attempt", "lease_id", "device_id"))


def _result_answer(op: Op) -> tuple[Any, ...]:
    if op.ok:
        return (op.status, *tuple(_field(op.body, name) for name in ("task_id", "attempt", "status", "recorded_at", "task_status")))
    return (op.status, _error_code(op))


def _create_answer(op: Op) -> tuple[Any, ...]:
    if op.ok:  # 201 first, 200 for a replay: the task is the same, its status may have moved on
        return ("2xx", *tuple(_field(op.body, name) for name in ("task_id", "kind", "max_attempts", "created_at", "idempotency_key")))
    return (op.status, _error_code(op))


def _check_replays(groups: Iterable[list[Op]], answer: Callable[[Op], tuple[Any, ...]], what: str,
                   violations: list[Violation]) -> int:
    """Each answer of a group equals the group's first answer if it was sent after that answer
    came back (a concurrent one is undecided). Returns how many replays were compared."""
    compared = 0
    for group in groups:
        answered = sorted((op for op in group if op.answered), key=lambda op: op.responded_at or 0)
        if not answered:
            continue
        first = answered[0]
        for op in answered[1:]:
            if op.invoked_at <= (first.responded_at or 0):
                continue
            compared += 1
            if answer(op) != answer(first):
                violations.append(Violation("replay_mismatch", f"{what}: answered {answer(op)} after "
                                            f"{answer(first)}", (first.index, op.index)))
    return compared


def verify(history: History, *, at_least: int, name: str = "") -> Report:
    """Check a finished test's history; print what was checked (``-rP`` shows it) and fail the
    test, describing each violation, if a promise was broken or too little was checked."""
    ops = history.ops
    report = check(ops)
    name = name or os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    print(f"history {name}: {report.operations} operations checked ({report.answered} answered), "
          f"{len(report.violations)} violation(s), {report.counts}")
    assert not report.violations, report.describe(ops)
    assert report.operations >= at_least, f"only {report.operations} operations recorded (expected {at_least}+)"
    return report
