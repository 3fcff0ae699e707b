"""The history checker (tests/history/checker.py) on synthetic histories.

Valid histories come from a small reference model of the contract (tests/history/contract_model.py).
Each kind of violation is injected into such a history and must be flagged; the valid ones must
pass.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.history.checker import check
from tests.history.contract_model import (
    DEVICE_HOST,
    Builder,
    appended,
    end_of,
    handed_out,
    histories,
)
from tests.history.records import TERMINAL, Op

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
    at = new.responded_at + data.draw(st.floats(0.01, 3))
    lease = old.body["lease_id"]
    how = data.draw(st.sampled_from(["renew", "batch", "result"]))
    if how == "renew":
        ops = appended(ops, old.side, "POST", f"/internal/v1/hosts/{old.side}/leases/{lease}/renew",
                       {"task_id": old.body["task_id"], "attempt": old.body["attempt"]}, 200, {}, at)
    elif how == "batch":
        entry = {"lease_id": lease, "task_id": old.body["task_id"], "attempt": old.body["attempt"]}
        ops = appended(ops, old.side, "POST", f"/internal/v1/hosts/{old.side}/renewals", {"leases": [entry]}, 200,
                       {"leases": [{"lease_id": lease, "status": 200}]}, at)
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
@given(histories(min_steps=20), st.data())
def test_a_replayed_result_handing_out_a_second_lease_is_flagged(ops: list[Op], data: st.DataObject) -> None:
    """Eager dispatch: the identical report again answers the same next assignment, or null."""
    eager = [op for op in ops if op.path.endswith("/results") and op.status == 200
             and isinstance((op.body or {}).get("next_assignment"), dict)]
    assume(eager)
    first = data.draw(st.sampled_from(eager))
    ghost = {**first.body["next_assignment"], "lease_id": "L-ghost"}
    if data.draw(st.booleans()):
        ghost["task_id"] = "t-ghost"
    ops = appended(ops, first.side, "POST", first.path, first.request, 200,
                   {**first.body, "replayed": True, "next_assignment": ghost}, end_of(ops))
    assert "replay_mismatch" in check(ops).kinds()


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


# -- (f) the order of placement, from the tasks' own histories ----------------------------------


def _at(ms: int) -> str:
    return f"2026-12-05T10:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


class _Orders:
    """A history of creates, then each task's history read at the end, as the fault tests make."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.clock = 0.0

    def _op(self, method: str, path: str, request: Any, status: int, body: Any) -> None:
        self.clock += 1
        self.ops.append(Op(index=len(self.ops), side="operator", method=method, path=path, query={},
                           request=request, invoked_at=self.clock, responded_at=self.clock + 0.5,
                           status=status, body=body, delivered=True))

    def team(self, team: str, **settings: Any) -> None:
        self._op("PUT", f"/api/v1/teams/{team}", settings, 200, {"team": team, **settings})

    def create(self, task_id: str, *, events: list[tuple[int, str, str]], team: str | None = None,
               priority: int = 0, driver: str = "sim") -> None:
        request: dict[str, Any] = {"kind": "goal", "goal": "x", "selector": {"driver": driver}, "priority": priority}
        if team:
            request["team"] = team
        self._op("POST", "/api/v1/tasks", request, 201, {"task_id": task_id, "status": "queued"})
        self.events[task_id] = [{"at": _at(ms), "type": kind, "status": status} for ms, kind, status in events]

    def read_histories(self) -> list[Op]:
        for task_id, events in self.events.items():
            self._op("GET", f"/api/v1/tasks/{task_id}/events", None, 200, {"events": events})
        return self.ops


def _waited(created: int, assigned: int) -> list[tuple[int, str, str]]:
    return [(created, "created", "queued"), (assigned, "assigned", "assigned"), (assigned + 5, "claimed", "running"),
            (assigned + 50, "result", "succeeded")]


def _order_kinds(ops: list[Op]) -> list[str]:
    return [v.kind for v in check(ops).violations if v.kind == "order_inverted"]


def test_an_older_task_of_a_team_passed_over_by_a_newer_one_is_flagged() -> None:
    history = _Orders()
    history.create("t_old", events=_waited(1000, 1010))
    history.create("t_new", events=_waited(1001, 1005))  # placed while t_old waited
    assert _order_kinds(history.read_histories()) == ["order_inverted"]


def test_tasks_placed_in_their_order_or_too_close_to_tell_pass() -> None:
    history = _Orders()
    history.create("t_old", events=_waited(1000, 1003))
    history.create("t_new", events=_waited(1001, 1005))
    history.create("t_tie", events=_waited(1005, 1020))  # queued in the very ms t_new was placed
    assert _order_kinds(history.read_histories()) == []


def test_a_higher_priority_passed_over_is_flagged_unless_its_team_has_a_quota() -> None:
    for capped, expected in ((False, ["order_inverted"]), (True, [])):
        history = _Orders()
        if capped:
            history.team("nightly", max_devices=1)
        history.create("t_urgent", team="nightly", priority=10, events=_waited(1000, 1010))
        history.create("t_later", team="release", priority=0, events=_waited(900, 1005))
        assert _order_kinds(history.read_histories()) == expected, capped


def test_tasks_that_asked_for_different_devices_are_not_compared() -> None:
    history = _Orders()
    history.create("t_old", events=_waited(1000, 1010), driver="adb")
    history.create("t_new", events=_waited(1001, 1005))
    history.create("t_other", team="release", events=_waited(1000, 1010))  # same priority, other team: by share
    assert _order_kinds(history.read_histories()) == []
