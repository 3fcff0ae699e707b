"""Histories of the contract, for the checker's own tests (tests/test_history_checker.py).

A small reference model of the contract: a coordinator that does exactly what PROTOCOL.md says,
one operation at a time, each operation's invocation and answer spread around the moment it took
effect (so operations overlap as real clients' do). ``histories()`` draws the history such a
coordinator's clients would record; ``Builder`` writes one by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.history.records import TERMINAL, Op

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
    dispatched: dict[str, str] = field(default_factory=dict)  # lease -> the next lease its result dispatched


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

    def renew_batch(self) -> None:
        """A host's leases renewed in one request: each entry answered as its single renewal."""
        if not self.leases:
            return
        leases = sorted(self.leases.values(), key=lambda lease: lease.lease_id)
        host = self.draw(st.sampled_from(sorted({lease.host for lease in leases})))
        mine = self.draw(st.lists(st.sampled_from([lease for lease in leases if lease.host == host]), min_size=1,
                                  max_size=4))
        request = {"leases": [{"lease_id": lease.lease_id, "task_id": lease.task_id, "attempt": lease.attempt}
                              for lease in mine]}
        answers = [{"lease_id": lease.lease_id, "status": 200, "lease_ttl_ms": 1000} if lease.live
                   else {"lease_id": lease.lease_id, "status": 409, "code": "lease_expired"} for lease in mine]
        self.add(host, "POST", f"/internal/v1/hosts/{host}/renewals", request, 200, {"leases": answers})

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
            task = self.tasks[report["task_id"]]
            _, answer = task.recorded[report["lease_id"]]
            answer = {**answer, "replayed": True}
            if report.get("next"):  # the same next assignment while its lease lives, else null
                following = self.leases.get(task.dispatched.get(report["lease_id"], ""))
                answer["next_assignment"] = self.assignment(following) if following and following.live else None
            self.add(host, "POST", f"/internal/v1/hosts/{host}/results", report, 200, answer)
            return
        if not self.leases:
            return
        lease = self.draw(st.sampled_from(sorted(self.leases.values(), key=lambda lease: lease.lease_id)))
        task = self.tasks[lease.task_id]
        status = self.draw(st.sampled_from(["succeeded", "failed", "retry"]))
        report = {"task_id": lease.task_id, "attempt": lease.attempt, "lease_id": lease.lease_id,
                  "status": "failed" if status == "retry" else status, "retryable": status == "retry"}
        eager = self.draw(st.sampled_from([True, True, True, False]))
        if eager:
            report["next"] = True
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
        following = None
        queued = [t for t in self.tasks.values() if t.status == "queued"]
        if eager and status != "retry" and queued:
            # eager dispatch: the freed device's next task, under a fresh lease, in the same step
            after = queued[0]
            following = Lease(f"L{len(self.leases)}", after.task_id, after.attempt, lease.device, lease.host, "")
            self.leases[following.lease_id] = self.busy[lease.device] = following
            after.status, after.lease, after.device = "running", following.lease_id, lease.device
            task.dispatched[lease.lease_id] = following.lease_id
        if eager:
            answer = {**answer, "next_assignment": None if following is None else self.assignment(following)}
        self.add(lease.host, "POST", path, report, 200, answer)

    def run(self, steps: int) -> list[Op]:
        actions = [self.create, self.create, self.claim, self.claim, self.renew, self.renew_batch, self.result, self.result,
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
    return [*ops, Op(index=len(ops), side=side, method=method, path=path, query={}, request=request, invoked_at=at, responded_at=at + 0.1, status=status, body=body, delivered=True)]


def end_of(ops: list[Op]) -> float:
    return max((op.responded_at or op.invoked_at for op in ops), default=0.0) + 1


def handed_out(ops: list[Op]) -> list[Op]:
    return [op for op in ops if op.path.endswith("/claim") and op.status == 200]
