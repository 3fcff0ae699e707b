"""The history checker (tests/history.py) on synthetic histories.

Valid histories come from a small reference model of the contract: a coordinator that does
exactly what PROTOCOL.md says, one operation at a time, each operation's invocation and answer
spread around the moment it took effect (so operations overlap as real clients' do). Each kind
of violation is then injected into such a history and must be flagged; the valid ones must pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.history import TERMINAL, Op, check

HOST_DEVICES = {"host-a": ["d1", "d2"], "host-b": ["d3"]}
DEVICE_HOST = {d: h for h, ds in HOST_DEVICES.items() for d in ds}


# -- building histories ------------------------------------------------------------------------


class Builder:
    """Appends operations whose effect happens at ``now`` (moved on by one per operation)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.now = 0.0

    def add(self, side: str, method: str, path: str, request: Any, status: int | None, body: Any = None, *,
            before: float = 0.1, after: float = 0.1, delivered: bool = True, at: float | None = None) -> Op:
        when = self.now = (self.now + 1) if at is None else at
        op = Op(index=len(self.ops), side=side, method=method, path=path, query={}, request=request,
                invoked_at=when - before, responded_at=None if status is None else when + after,
                status=status, body=body, delivered=delivered and status is not None)
        self.ops.append(op)
        return op


@dataclass
class Task:
    task_id: str
    key: str | None
    max_attempts: int
    created_at: str
    status: str = "queued"
    attempt: int = 1
    lease: str | None = None
    device: str | None = None
    result: dict[str, Any] | None = None  # what the final read shows
    recorded: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # lease -> (report, answer)


@dataclass
class Lease:
    lease_id: str
    task_id: str
    attempt: int
    device: str
    host: str
    claim_id: str
    live: bool = True


class Model:
    """The contract's coordinator, one step at a time, writing the history a client would see."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.b = Builder()
        self.tasks: dict[str, Task] = {}
        self.leases: dict[str, Lease] = {}
        self.busy: dict[str, Lease] = {}  # device -> its live lease
        self.claims: list[Lease] = []
        self.sent: list[tuple[str, dict[str, Any]]] = []  # (host, result report) once recorded

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def add(self, side: str, method: str, path: str, request: Any, status: int, body: Any = None) -> Op:
        """Record one operation; the client may lose its answer (the coordinator acted anyway)."""
        spread = st.floats(0, 2.5, allow_nan=False)
        fate = self.draw(st.sampled_from(["seen"] * 6 + ["lost", "none"]))
        return self.b.add(side, method, path, request, None if fate == "none" else status, body,
                          before=self.draw(spread), after=self.draw(spread), delivered=fate == "seen")

    # -- operator ---

    def create(self) -> None:
        keys = [t.key for t in self.tasks.values() if t.key]
        if keys and self.draw(st.booleans()):
            key = self.draw(st.sampled_from(keys))
            task = next(t for t in self.tasks.values() if t.key == key)
            self.add("operator", "POST", "/api/v1/tasks", {"kind": "goal", "goal": "g", "idempotency_key": task.key},
                     200, self.view(task))
            return
        n = len(self.tasks)
        key = f"k{n}" if self.draw(st.booleans()) else None
        task = self.tasks[f"t{n}"] = Task(f"t{n}", key, self.draw(st.integers(1, 3)), f"2026-01-01T00:00:{n:02d}.000Z")
        request: dict[str, Any] = {"kind": "goal", "goal": "g", "max_attempts": task.max_attempts}
        if key:
            request["idempotency_key"] = key
        self.add("operator", "POST", "/api/v1/tasks", request, 201, self.view(task))

    def view(self, task: Task) -> dict[str, Any]:
        return {"task_id": task.task_id, "kind": "goal", "status": task.status, "attempt": task.attempt,
                "max_attempts": task.max_attempts, "created_at": task.created_at, "idempotency_key": task.key,
                "result": task.result}

    def cancel(self) -> None:
        queued = [t for t in self.tasks.values() if t.status == "queued"]
        if queued:
            task = self.draw(st.sampled_from(queued))
            self.end(task, "cancelled")
            self.add("operator", "POST", f"/api/v1/tasks/{task.task_id}/cancel", None, 200, self.view(task))

    def read(self, task: Task) -> None:
        self.add("operator", "GET", f"/api/v1/tasks/{task.task_id}", None, 200, self.view(task))

    def end(self, task: Task, status: str, result: dict[str, Any] | None = None) -> None:
        task.status = status
        task.result = result or {"status": status, "attempt": task.attempt}

    # -- hosts ---

    def claim(self) -> None:
        host = self.draw(st.sampled_from(sorted(HOST_DEVICES)))
        path = f"/internal/v1/hosts/{host}/claim"
        replayable = [lease for lease in self.claims if lease.host == host]
        if replayable and self.draw(st.booleans()):
            lease = self.draw(st.sampled_from(replayable))
            answer = self.assignment(lease) if lease.live else None
            self.add(host, "POST", path, {"claim_id": lease.claim_id}, 200 if answer else 204, answer)
            return
        claim_id = f"c{len(self.b.ops)}"
        free = [d for d in HOST_DEVICES[host] if d not in self.busy]
        queued = [t for t in self.tasks.values() if t.status == "queued"]
        if not (free and queued):
            self.add(host, "POST", path, {"claim_id": claim_id}, 204)
            return
        task, device = queued[0], self.draw(st.sampled_from(free))
        lease = Lease(f"L{len(self.leases)}", task.task_id, task.attempt, device, host, claim_id)
        self.leases[lease.lease_id] = self.busy[device] = lease
        self.claims.append(lease)
        task.status, task.lease, task.device = "running", lease.lease_id, device
        self.add(host, "POST", path, {"claim_id": claim_id}, 200, self.assignment(lease))

    def assignment(self, lease: Lease) -> dict[str, Any]:
        return {"task_id": lease.task_id, "attempt": lease.attempt, "lease_id": lease.lease_id,
                "device_id": lease.device, "lease_ttl_ms": 1000, "lease_expires_at": f"x{self.b.now}"}

    def renew(self) -> None:
        if not self.leases:
            return
        lease = self.draw(st.sampled_from(sorted(self.leases.values(), key=lambda lease: lease.lease_id)))
        request = {"task_id": lease.task_id, "attempt": lease.attempt}
        path = f"/internal/v1/hosts/{lease.host}/leases/{lease.lease_id}/renew"
        if lease.live:
            self.add(lease.host, "POST", path, request, 200, {"lease_ttl_ms": 1000})
        else:
            self.add(lease.host, "POST", path, request, 409, {"error": {"code": "lease_expired"}})

    def stop(self, lease: Lease) -> None:
        lease.live = False
        del self.busy[lease.device]

    def next_attempt(self, task: Task, reason: str) -> None:
        if task.attempt < task.max_attempts:
            task.status, task.attempt, task.lease = "queued", task.attempt + 1, None
        else:
            self.end(task, "failed", {"status": "failed", "attempt": task.attempt, "failure_reason": reason})

    def expire(self) -> None:
        live = [lease for lease in self.leases.values() if lease.live]
        if live:
            lease = self.draw(st.sampled_from(live))
            self.stop(lease)
            self.next_attempt(self.tasks[lease.task_id], "lease_expired")

    def result(self) -> None:
        if self.sent and self.draw(st.booleans()):  # an identical report again
            host, report = self.draw(st.sampled_from(self.sent))
            _, answer = self.tasks[report["task_id"]].recorded[report["lease_id"]]
            self.add(host, "POST", f"/internal/v1/hosts/{host}/results", report, 200, {**answer, "replayed": True})
            return
        if not self.leases:
            return
        lease = self.draw(st.sampled_from(sorted(self.leases.values(), key=lambda lease: lease.lease_id)))
        task = self.tasks[lease.task_id]
        status = self.draw(st.sampled_from(["succeeded", "failed", "retry"]))
        report = {"task_id": lease.task_id, "attempt": lease.attempt, "lease_id": lease.lease_id,
                  "status": "failed" if status == "retry" else status, "retryable": status == "retry"}
        path = f"/internal/v1/hosts/{lease.host}/results"
        if not lease.live:
            if lease.lease_id not in task.recorded:
                self.add(lease.host, "POST", path, report, 409, {"error": {"code": "stale_attempt"}})
            return
        self.stop(lease)
        if status == "retry" and task.attempt < task.max_attempts:
            self.next_attempt(task, "retryable")
            task_status = "queued"
        else:
            self.end(task, report["status"], {"status": report["status"], "attempt": lease.attempt})
            task_status = task.status
        answer = {"task_id": lease.task_id, "attempt": lease.attempt, "status": report["status"],
                  "recorded_at": f"r{self.b.now}", "task_status": task_status, "replayed": False}
        task.recorded[lease.lease_id] = (json.dumps(report), answer)
        self.sent.append((lease.host, report))
        self.add(lease.host, "POST", path, report, 200, answer)

    def run(self, steps: int) -> list[Op]:
        actions = [self.create, self.create, self.claim, self.claim, self.renew, self.result, self.result,
                   self.expire, self.cancel]
        for _ in range(steps):
            self.draw(st.sampled_from(actions))()
        for lease in [lease for lease in self.leases.values() if lease.live]:
            self.stop(lease)
            self.next_attempt(self.tasks[lease.task_id], "lease_expired")
        for task in self.tasks.values():
            if task.status not in TERMINAL:
                self.end(task, "cancelled")
        for task in self.tasks.values():  # the final reads: always answered, after everything
            self.b.add("operator", "GET", f"/api/v1/tasks/{task.task_id}", None, 200, self.view(task))
        return self.b.ops


@st.composite
def histories(draw: st.DrawFn, min_steps: int = 5) -> list[Op]:
    return Model(draw(st.data())).run(draw(st.integers(min_steps, 60)))


def appended(ops: list[Op], side: str, method: str, path: str, request: Any, status: int, body: Any,
             at: float) -> list[Op]:
    return ops + [Op(index=len(ops), side=side, method=method, path=path, query={}, request=request,
                     invoked_at=at, responded_at=at + 0.1, status=status, body=body, delivered=True)]


def end_of(ops: list[Op]) -> float:
    return max((op.responded_at or op.invoked_at for op in ops), default=0.0) + 1


def handed_out(ops: list[Op]) -> list[Op]:
    return [op for op in ops if op.path.endswith("/claim") and op.status == 200]


PROFILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                           HealthCheck.too_slow])


# -- valid histories pass ----------------------------------------------------------------------


@PROFILE
@given(histories())
def test_a_history_of_the_contract_has_no_violation(ops: list[Op]) -> None:
    report = check(ops)
    assert report.violations == [], report.describe(ops)
    assert report.operations == len(ops)


# -- each kind of violation is flagged ---------------------------------------------------------


@PROFILE
@given(histories(), st.data())
def test_an_acknowledged_create_that_never_ends_is_flagged(ops: list[Op], data: st.DataObject) -> None:
    acknowledged = [op.body["task_id"] for op in ops if op.path == "/api/v1/tasks" and op.status in (200, 201)]
    assume(acknowledged)
    task_id = data.draw(st.sampled_from(acknowledged))
    reads = [op for op in ops if op.path == f"/api/v1/tasks/{task_id}" and op.method == "GET"]
    if data.draw(st.booleans()):  # the final read shows it still running
        final = reads[-1]
        ops = [replace(op, body={**op.body, "status": "running"}) if op is final else op for op in ops]
    else:  # nobody ever read it: nothing says it ended
        ops = [op for op in ops if op not in reads]
    assert "unfinished" in check(ops).kinds()


@PROFILE
@given(histories())
def test_a_second_attempt_recording_a_result_after_a_terminal_one_is_flagged(ops: list[Op]) -> None:
    ended = [op for op in ops if op.path.endswith("/results") and op.status == 200
             and op.body["replayed"] is False and op.body["task_status"] in TERMINAL]
    assume(ended)
    first = ended[0]
    request = {**first.request, "attempt": first.request["attempt"] + 1, "lease_id": "L-ghost"}
    answer = {**first.body, "attempt": request["attempt"], "recorded_at": "r-ghost"}
    ops = appended(ops, first.side, "POST", first.path, request, 200, answer, end_of(ops))
    assert "two_results" in check(ops).kinds()


@PROFILE
@given(histories(min_steps=20), st.data())
def test_a_renewal_or_result_accepted_for_a_replaced_attempt_is_flagged(ops: list[Op], data: st.DataObject) -> None:
    claims = handed_out(ops)
    pairs = [(old, new) for old in claims for new in claims
             if old.body["task_id"] == new.body["task_id"] and new.body["attempt"] > old.body["attempt"]]
    assume(pairs)
    old, new = data.draw(st.sampled_from(pairs))
    # invoked just after the newer attempt's answer came back
    at = new.responded_at + data.draw(st.floats(0.01, 3))  # type: ignore[operator]
    lease = old.body["lease_id"]
    if data.draw(st.booleans()):
        ops = appended(ops, old.side, "POST", f"/internal/v1/hosts/{old.side}/leases/{lease}/renew",
                       {"task_id": old.body["task_id"], "attempt": old.body["attempt"]}, 200, {}, at)
    else:
        request = {"task_id": old.body["task_id"], "attempt": old.body["attempt"], "lease_id": lease,
                   "status": "succeeded", "extra": "ghost"}
        ops = appended(ops, old.side, "POST", f"/internal/v1/hosts/{old.side}/results", request, 200,
                       {"task_id": old.body["task_id"], "attempt": old.body["attempt"], "status": "succeeded",
                        "recorded_at": "r-ghost", "task_status": "succeeded", "replayed": False}, at)
    assert "stale_accepted" in check(ops).kinds()


@PROFILE
@given(histories(), st.data())
def test_a_device_handed_to_a_second_lease_while_one_is_live_is_flagged(ops: list[Op], data: st.DataObject) -> None:
    claims = handed_out(ops)
    assume(claims)
    held = data.draw(st.sampled_from(claims)).body
    host = DEVICE_HOST[held["device_id"]]
    at = end_of(ops)
    ghost = {"task_id": "t-ghost", "attempt": 1, "lease_id": "L-ghost", "device_id": held["device_id"]}
    ops = appended(ops, host, "POST", f"/internal/v1/hosts/{host}/claim", {"claim_id": "c-ghost"}, 200, ghost, at)
    # ... and the earlier lease is still renewed after that
    ops = appended(ops, host, "POST", f"/internal/v1/hosts/{host}/leases/{held['lease_id']}/renew",
                   {"task_id": held["task_id"], "attempt": held["attempt"]}, 200, {}, at + 1)
    assert "device_overlap" in check(ops).kinds()


@PROFILE
@given(histories(), st.data())
def test_a_replay_answered_differently_is_flagged(ops: list[Op], data: st.DataObject) -> None:
    at = end_of(ops)
    kind = data.draw(st.sampled_from(["claim", "result", "create"]))
    if kind == "claim":
        claims = handed_out(ops)
        assume(claims)
        first = data.draw(st.sampled_from(claims))
        other = {**first.body, data.draw(st.sampled_from(["lease_id", "task_id", "attempt"])): "other"}
        ops = appended(ops, first.side, "POST", first.path, first.request, 200, other, at)
    elif kind == "result":
        recorded = [op for op in ops if op.path.endswith("/results") and op.status == 200]
        assume(recorded)
        first = data.draw(st.sampled_from(recorded))
        if data.draw(st.booleans()):
            answer: Any = {**first.body, "replayed": True, "recorded_at": "r-other"}
            ops = appended(ops, first.side, "POST", first.path, first.request, 200, answer, at)
        else:
            ops = appended(ops, first.side, "POST", first.path, first.request, 409,
                           {"error": {"code": "stale_attempt"}}, at)
    else:
        keyed = [op for op in ops if op.path == "/api/v1/tasks" and op.status in (200, 201)
                 and op.request.get("idempotency_key")]
        assume(keyed)
        first = data.draw(st.sampled_from(keyed))
        status = data.draw(st.sampled_from([200, 201]))
        ops = appended(ops, "operator", "POST", first.path, first.request, status,
                       {**first.body, "task_id": "t-other"}, at)
    assert "replay_mismatch" in check(ops).kinds()


# -- the boundaries of what is decidable -------------------------------------------------------


def claim(b: Builder, host: str, claim_id: str, task: str, attempt: int, lease: str, device: str, **kw: Any) -> Op:
    body = {"task_id": task, "attempt": attempt, "lease_id": lease, "device_id": device}
    return b.add(host, "POST", f"/internal/v1/hosts/{host}/claim", {"claim_id": claim_id}, 200, body, **kw)


def renew(b: Builder, host: str, task: str, attempt: int, lease: str, status: int = 200, **kw: Any) -> Op:
    return b.add(host, "POST", f"/internal/v1/hosts/{host}/leases/{lease}/renew",
                 {"task_id": task, "attempt": attempt}, status, {}, **kw)


def test_a_renewal_overlapping_the_newer_claim_is_undecided_and_not_flagged() -> None:
    b = Builder()
    claim(b, "host-a", "c1", "t1", 1, "L1", "d1")
    renew(b, "host-a", "t1", 1, "L1", at=5.0, before=3.0)  # invoked at 2.0, took effect before...
    claim(b, "host-b", "c2", "t1", 2, "L2", "d3", at=6.0, before=4.5)  # ...this claim, answered at 6.1
    assert check(b.ops).violations == []
    renew(b, "host-a", "t1", 1, "L1", at=6.5, before=0.1)  # invoked at 6.4, after that answer: decided
    assert check(b.ops).kinds() == {"stale_accepted"}


def test_an_expired_lease_whose_agent_stopped_does_not_overlap_the_next_one_on_its_device() -> None:
    b = Builder()
    claim(b, "host-a", "c1", "t1", 1, "L1", "d1")
    renew(b, "host-a", "t1", 1, "L1")
    # the agent stalls; the lease expires; the same device takes attempt 2
    claim(b, "host-a", "c2", "t1", 2, "L2", "d1")
    renew(b, "host-a", "t1", 1, "L1", status=409)  # the stalled agent wakes: refused
    renew(b, "host-a", "t1", 2, "L2")
    report = check(b.ops)
    assert report.violations == [] and report.counts["leases"] == 2


def test_a_claim_replay_after_its_lease_ended_may_answer_204_and_a_lost_first_answer_counts() -> None:
    b = Builder()
    b.add("operator", "POST", "/api/v1/tasks", {"goal": "g", "idempotency_key": "k"}, None)  # no answer
    b.add("operator", "POST", "/api/v1/tasks", {"goal": "g", "idempotency_key": "k"}, 200,
          {"task_id": "t1", "kind": "goal", "created_at": "c"})
    claim(b, "host-a", "c1", "t1", 1, "L1", "d1", delivered=False)  # the proxy lost it
    claim(b, "host-a", "c1", "t1", 1, "L1", "d1")
    b.add("host-a", "POST", "/internal/v1/hosts/host-a/claim", {"claim_id": "c1"}, 204)
    b.add("operator", "GET", "/api/v1/tasks/t1", None, 200, {"task_id": "t1", "status": "failed"})
    report = check(b.ops)
    assert report.violations == [], report.describe(b.ops)
    assert report.counts["claim_replays"] == 1 and report.counts["creates_acknowledged"] == 1
    # the same replay handing out another lease is flagged, even though the first answer was lost
    claim(b, "host-a", "c1", "t1", 2, "L9", "d1")
    assert "replay_mismatch" in check(b.ops).kinds()


def test_a_lease_whose_claim_answer_arrived_late_is_not_taken_for_live_beside_its_successor() -> None:
    """Found by the valid-history property: attempt 1's claim was answered slowly (invoked at 3,
    answered at 5), its lease expired unseen, and attempt 2 was handed the device at 4 and renewed
    at 13. Attempt 1 was certainly live only at its grant, somewhere in [3, 5]: no overlap."""
    claim = "/internal/v1/hosts/host-a/claim"
    first = {"task_id": "t0", "attempt": 1, "lease_id": "L0", "device_id": "d1"}
    second = {"task_id": "t0", "attempt": 2, "lease_id": "L1", "device_id": "d1"}
    ops = [
        Op(index=0, side="host-a", method="POST", path=claim, query={}, request={"claim_id": "c1"},
           invoked_at=3.0, responded_at=5.0, status=200, body=first, delivered=True),
        Op(index=1, side="host-a", method="POST", path=claim, query={}, request={"claim_id": "c2"},
           invoked_at=4.0, responded_at=4.0, status=200, body=second, delivered=True),
        Op(index=2, side="host-a", method="POST", path="/internal/v1/hosts/host-a/leases/L1/renew", query={},
           request={"task_id": "t0", "attempt": 2}, invoked_at=13.0, responded_at=13.0, status=200, body={},
           delivered=True),
    ]
    assert "device_overlap" not in check(ops).kinds()
    # ... while a grant that certainly fell inside the live lease's interval is flagged
    inside = replace(ops[0], invoked_at=6.0, responded_at=7.0)
    assert "device_overlap" in check([inside, ops[1], ops[2]]).kinds()
