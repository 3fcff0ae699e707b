"""Runs (PROTOCOL.md, "Runs: many tasks as one"): created whole or not at all, from a list of tasks
or a matrix; their status and counts kept by the scripts that change their tasks; cancel,
rerun-failed, scopes and retention; through the HTTP API on real Redis, fakeredis and the cluster.
The report is test_run_reports.py's."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree

import orjson
import pytest

from coordinator.clock import ShiftedClock
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease, silence_host

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

STATUSES = ("queued", "assigned", "running", "succeeded", "failed", "cancelled")


def _counts(**given: int) -> dict[str, int]:
    return {status: given.get(status, 0) for status in STATUSES}


def _goal(text: str, **target: Any) -> dict[str, Any]:
    return {"kind": "goal", "goal": text, **(target or {"selector": {"driver": "sim"}})}


async def _create_run(api: Api, expect: int = 201, headers: dict[str, str] | None = None,
                      **body: Any) -> dict[str, Any]:
    response = await api.client.post("/api/v1/runs", json=body, headers=headers or api.admin_headers)
    assert response.status_code == expect, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def _run(api: Api, run_id: str) -> dict[str, Any]:
    response = await api.admin("GET", f"/api/v1/runs/{run_id}")
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def _run_tasks(api: Api, run_id: str) -> list[dict[str, Any]]:
    response = await api.admin("GET", "/api/v1/tasks", params={"run_id": run_id})
    assert response.status_code == 200, response.text
    tasks: list[dict[str, Any]] = response.json()["tasks"]
    return tasks


async def _feed(api: Api, *types: str) -> list[dict[str, Any]]:
    """The feed's events of these types, oldest first."""
    entries = await api.ctx.store.redis.xrange(api.ctx.store.keys.feed)
    events = [orjson.loads(fields[b"e"]) for _, fields in entries]
    return [e for e in events if e["type"] in types]


async def _report(api: Api, host: str, status: str = "succeeded", **extra: Any) -> dict[str, Any]:
    assignment = await claim_one(api, host)
    assert (await api.result(host, assignment, status, **extra)).status_code == 200
    return assignment


async def _token(api: Api, name: str, scopes: list[str], team: str | None = None) -> dict[str, str]:
    body: dict[str, Any] = {"name": name, "scopes": scopes}
    if team is not None:
        body["team"] = team
    made = await api.admin("POST", "/api/v1/operator-tokens", json=body)
    assert made.status_code == 201, made.text
    return {"authorization": f"Bearer {made.json()['token']}"}


async def _nothing_created(api: Api) -> None:
    assert (await api.admin("GET", "/api/v1/runs")).json()["runs"] == []
    assert (await api.admin("GET", "/api/v1/tasks")).json()["tasks"] == []


# -- create -----------------------------------------------------------------------------------


async def test_a_list_of_tasks_is_created_as_one_run_each_task_naming_it(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    run = await _create_run(api, name="nightly", priority=5, team="qa", tasks=[
        _goal("open settings", device_id="a1"), _goal("open settings", device_id="a2"), _goal("take a photo")])
    assert run["run_id"].startswith("r_") and run["name"] == "nightly" and run["status"] == "running"
    assert run["counts"] == _counts(assigned=2, queued=1)
    assert (run["team"], run["priority"], run["tasks"], run["ended_at"]) == ("qa", 5, 3, None)
    # the answer is the run's summary; GET gives it with its breakdown
    shown = await _run(api, run["run_id"])
    assert "breakdown" not in run and {k: v for k, v in shown.items() if k != "breakdown"} == run
    tasks = await _run_tasks(api, run["run_id"])
    assert len(tasks) == 3
    assert {(t["run_id"], t["team"], t["priority"], t["rerun_of"]) for t in tasks} == {(run["run_id"], "qa", 5, None)}
    run = shown
    by_device = {row["device_id"]: row["counts"] for row in run["breakdown"]["devices"]}
    assert by_device == {None: _counts(queued=1), "a1": _counts(assigned=1), "a2": _counts(assigned=1)}
    by_work = {row["work"]: row["counts"] for row in run["breakdown"]["work"]}
    assert by_work == {"open settings": _counts(assigned=2), "take a photo": _counts(queued=1)}
    created = await _feed(api, "run_created")
    assert [(e["run_id"], e["tasks"], e["actor"], e["actor_id"]) for e in created] == [
        (run["run_id"], 3, "admin", "admin")]
    # an ordinary task names no run
    plain = (await api.create_task(device_id="a1")).json()
    assert plain["run_id"] is None
    assert len(await _run_tasks(api, run["run_id"])) == 3


async def test_a_matrix_pins_one_task_per_work_item_to_each_matching_enabled_device(api: Api) -> None:
    pixel = {"model": "pixel"}
    await api.heartbeat("host-a", [{"device_id": d, "driver": "sim", "status": "available", "labels": pixel}
                                   for d in ("a1", "a2", "a3")]
                        + [{"device_id": "a4", "driver": "sim", "status": "available", "labels": {"model": "other"}}])
    await api.heartbeat("host-b", [{"device_id": "b1", "driver": "sim", "status": "busy", "labels": pixel}])
    assert (await api.admin("POST", "/api/v1/devices/a3/disable", json={})).status_code == 200
    run = await _create_run(api, matrix={
        "work": [{"kind": "goal", "goal": "open settings"}, {"kind": "workflow", "workflow": {"name": "login"}}],
        "devices": {"driver": "sim", "labels": pixel}})
    # a1, a2 and the busy b1 (pooled and enabled); not a3 (disabled) nor a4 (another model)
    assert run["tasks"] == 6 and run["counts"] == _counts(assigned=2, queued=4)
    tasks = await _run_tasks(api, run["run_id"])
    pinned = sorted((t.get("goal") or t["workflow"]["name"], t["device_id"], t["selector"]) for t in tasks)
    assert pinned == sorted((work, device, None) for work in ("open settings", "login") for device in ("a1", "a2", "b1"))
    run = await _run(api, run["run_id"])
    devices = {row["device_id"] for row in run["breakdown"]["devices"]}
    assert devices == {"a1", "a2", "b1"}
    assert {row["work"] for row in run["breakdown"]["work"]} == {"open settings", "login"}


async def test_a_matrix_takes_only_devices_that_could_run_now_and_says_why_it_left_each_out(api: Api) -> None:
    pixel = {"model": "pixel"}

    def phone(device_id: str, status: str = "available") -> dict[str, Any]:
        return {"device_id": device_id, "driver": "sim", "status": status, "labels": pixel}

    def lists(*workflows: str) -> dict[str, Any]:
        return {"version": "0.1.0", "capabilities": {"workflows": list(workflows)}}

    await api.heartbeat("host-a", [phone("a1"), phone("a2", "busy"), phone("a3", "unavailable"), phone("a4")],
                        agent=lists("login"))
    await api.heartbeat("host-b", [phone("b1")], agent=lists())
    await api.heartbeat("host-c", [phone("c1")])
    await silence_host(api, "host-c")
    assert (await api.admin("POST", "/api/v1/devices/a4/disable", json={})).status_code == 200
    work = [{"kind": "goal", "goal": "open settings"}, {"kind": "workflow", "workflow": {"name": "login"}}]
    run = await _create_run(api, matrix={"work": work, "devices": {"driver": "sim", "labels": pixel}})
    # Busy a2 waits its turn; b1's host does not list `login`, so it runs the goal alone.
    tasks = await _run_tasks(api, run["run_id"])
    pinned = sorted((t.get("goal") or t["workflow"]["name"], t["device_id"]) for t in tasks)
    assert pinned == sorted([("open settings", "a1"), ("open settings", "a2"), ("open settings", "b1"),
                             ("login", "a1"), ("login", "a2")])
    assert run["tasks"] == 5 and run["excluded_count"] == 4
    assert run["excluded"] == [{"device_id": "a3", "reason": "unavailable"}, {"device_id": "a4", "reason": "disabled"},
                               {"device_id": "b1", "reason": "no_workflow", "work": "login"},
                               {"device_id": "c1", "reason": "host_offline"}]

    # A draining host's devices are left out too; none left that could run it now is 409.
    for host in ("host-a", "host-b"):
        assert (await api.admin("POST", f"/api/v1/hosts/{host}/drain")).status_code == 200
    refused = await _create_run(api, 409, matrix={"work": work, "devices": {"driver": "sim", "labels": pixel}})
    assert refused["error"]["code"] == "no_matching_device"
    assert {(e["device_id"], e["reason"]) for e in refused["error"]["details"]["excluded"]} == {
        ("a1", "host_draining"), ("a2", "host_draining"), ("a3", "host_draining"), ("a4", "disabled"),
        ("b1", "host_draining"), ("c1", "host_offline")}
    assert len((await api.admin("GET", "/api/v1/runs")).json()["runs"]) == 1  # the second created nothing


async def test_a_matrix_that_matches_no_device_is_409_and_creates_nothing(api: Api) -> None:
    await api.heartbeat("host-a", [{"device_id": "a1", "driver": "sim", "status": "available", "labels": {"m": "x"}}])
    for selector in ({"driver": "adb"}, {"driver": "sim", "labels": {"m": "y"}}):
        answer = await _create_run(api, 409, matrix={"work": [{"kind": "goal", "goal": "g"}], "devices": selector})
        assert answer["error"]["code"] == "no_matching_device"
        assert answer["error"]["details"] == {"excluded": []}  # none matched, so none was left out
    await _nothing_created(api)


@pytest.mark.parametrize(("body", "place"), [
    ({"tasks": [_goal("g")] * 3 + [{**_goal("g"), "max_attempts": 0}]}, "tasks[3].max_attempts"),
    ({"tasks": [_goal("g"), {**_goal("g"), "max_atempts": 2}]}, "tasks[1].max_atempts"),
    ({"tasks": [_goal("g")] * 1001}, "tasks"),
    ({"tasks": []}, "tasks"),
    ({"tasks": [{**_goal("g"), "team": "other"}]}, "team"),
    ({"tasks": [_goal("g")], "nmae": "x"}, "nmae"),
    ({"matrix": {"work": [], "devices": {"driver": "sim"}}}, "matrix.work"),
    ({"matrix": {"work": [{"kind": "goal"}], "devices": {"driver": "sim"}}}, "matrix.work[0]"),
    ({"matrix": {"work": [{"kind": "build", "goal": "g"}], "devices": {"driver": "sim"}}}, "matrix.work[0].kind"),
    ({"matrix": {"work": [{"kind": "goal", "goal": "g"}], "devices": {"drivers": "sim"}}}, "matrix.devices"),
    ({"matrix": {"work": [{"kind": "goal", "goal": "g"}], "devices": "sim"}}, "matrix.devices"),
    ({"matrix": {"work": [{"kind": "goal", "goal": "g"}], "devices": {"driver": "sim"}}, "tasks": [_goal("g")]},
     "tasks or matrix"),
    ({}, "tasks or matrix"),
])
async def test_bad_input_anywhere_is_400_naming_the_place_and_creates_nothing(api: Api, body: dict[str, Any],
                                                                           place: str) -> None:
    await api.heartbeat("host-a", ["a1"])
    answer = await _create_run(api, 400, **body)
    assert answer["error"]["code"] == "invalid_request" and place in answer["error"]["message"]
    await _nothing_created(api)


async def test_a_matrix_of_more_than_1000_tasks_is_400_and_creates_nothing(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    work = [{"kind": "goal", "goal": f"goal {i}"} for i in range(501)]
    answer = await _create_run(api, 400, matrix={"work": work, "devices": {"driver": "sim"}})
    assert answer["error"]["code"] == "invalid_request" and "1000" in answer["error"]["message"]
    await _nothing_created(api)


async def test_an_idempotency_key_returns_the_same_run(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    body = {"idempotency_key": "nightly-42", "tasks": [_goal("g", device_id="a1")]}
    first = await _create_run(api, **body)
    again = await _create_run(api, 200, **body)
    assert again["run_id"] == first["run_id"]
    assert len((await api.admin("GET", "/api/v1/runs")).json()["runs"]) == 1
    other = await _create_run(api, 409, idempotency_key="nightly-42", tasks=[_goal("other", device_id="a1")])
    assert other["error"]["code"] == "idempotency_conflict"


# -- status and counts ---------------------------------------------------------------------


async def test_the_run_succeeds_when_its_last_task_succeeds_and_says_so_in_the_feed(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    run = await _create_run(api, tasks=[_goal("g", device_id="a1"), _goal("g", device_id="a2")])
    await _report(api, "host-a")
    middle = await _run(api, run["run_id"])
    assert middle["status"] == "running" and middle["counts"] == _counts(succeeded=1, assigned=1)
    assert await _feed(api, "run_ended") == []
    await _report(api, "host-a")
    ended = await _run(api, run["run_id"])
    assert ended["status"] == "succeeded" and ended["counts"] == _counts(succeeded=2)
    assert ended["ended_at"] is not None
    assert [(e["run_id"], e["status"]) for e in await _feed(api, "run_ended")] == [(run["run_id"], "succeeded")]


async def test_a_run_ends_failed_when_a_task_fails_and_succeeded_only_when_all_did(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    run = await _create_run(api, tasks=[_goal("first", device_id="a1", max_attempts=1),
                                        _goal("second", device_id="a1")])
    await _report(api, "host-a", "failed", failure_reason="assertion_failed")
    await _report(api, "host-a")
    ended = await _run(api, run["run_id"])
    assert ended["status"] == "failed" and ended["counts"] == _counts(succeeded=1, failed=1)
    assert ended["ended_at"] is not None
    assert [(e["run_id"], e["status"]) for e in await _feed(api, "run_ended")] == [(run["run_id"], "failed")]
    good = await _create_run(api, tasks=[_goal("g", device_id="a1")])
    await _report(api, "host-a")
    assert (await _run(api, good["run_id"]))["status"] == "succeeded"


async def test_a_retryable_failure_and_an_expired_lease_keep_the_run_running(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    run = await _create_run(api, tasks=[_goal("g", device_id="a1", max_attempts=2)])
    await _report(api, "host-a", "failed", retryable=True)
    assert (await _run(api, run["run_id"]))["counts"] == _counts(assigned=1)
    assignment = await claim_one(api, "host-a")
    await expire_lease(api, assignment)
    await api.sweep()
    ended = await _run(api, run["run_id"])
    assert ended["status"] == "failed" and ended["counts"] == _counts(failed=1)


async def test_queue_timeouts_end_a_run(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock) as api:
        run = await _create_run(api, tasks=[_goal("g", device_id="nowhere", queue_timeout_s=1)])
        clock.advance(1001)
        await api.sweep()
        ended = await _run(api, run["run_id"])
        assert ended["status"] == "failed" and ended["counts"] == _counts(failed=1)


# -- cancel and rerun ------------------------------------------------------------------------


async def test_cancel_cancels_every_task_not_ended_and_the_run_ends_cancelled(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    run = await _create_run(api, tasks=[_goal("g", device_id="a1"), _goal("g", device_id="a2"),
                                        _goal("g", device_id="a1")])
    running = await claim_one(api, "host-a")  # a1's: running; a2's assigned; the second a1 queued
    cancelled = await api.admin("POST", f"/api/v1/runs/{run['run_id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    view = cancelled.json()
    assert view["status"] == "running" and view["cancel_requested"] is True
    assert view["counts"] == _counts(running=1, cancelled=2)
    again = await api.admin("POST", f"/api/v1/runs/{run['run_id']}/cancel")
    assert again.status_code == 200 and again.json()["counts"] == view["counts"]
    renewed = await api.renew("host-a", running)
    assert renewed.json()["cancel_requested"] is True
    assert (await api.result("host-a", running, "cancelled")).status_code == 200
    ended = await _run(api, run["run_id"])
    assert ended["status"] == "cancelled" and ended["counts"] == _counts(cancelled=3)


async def test_a_device_a_cancelled_run_lets_go_is_not_handed_another_of_its_tasks(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    run = await _create_run(api, tasks=[_goal("first", device_id="a1"), _goal("second", device_id="a1")])
    other = (await api.create_task(device_id="a1")).json()
    second = next(t for t in await _run_tasks(api, run["run_id"]) if t["goal"] == "second")
    assert second["status"] == "queued"
    await api.admin("POST", f"/api/v1/runs/{run['run_id']}/cancel")
    assert [(e["type"], e["actor_id"]) for e in await api.events(second["task_id"])] == [
        ("created", "admin"), ("cancelled", "admin")]
    assert (await api.task(other["task_id"]))["status"] == "assigned"  # a1 went to the next in line


async def test_rerun_failed_replaces_each_failed_task_in_its_place(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    run = await _create_run(api, tasks=[_goal("passes", device_id="a1"), _goal("flaky", device_id="a1",
                                                                               max_attempts=1)])
    await _report(api, "host-a")
    failed = await _report(api, "host-a", "failed", failure_reason="timeout")
    assert (await _run(api, run["run_id"]))["status"] == "failed"
    rerun = await api.admin("POST", f"/api/v1/runs/{run['run_id']}/rerun-failed")
    assert rerun.status_code == 201, rerun.text
    assert (rerun.json()["run_id"], rerun.json()["created"]) == (run["run_id"], 1)
    view = await _run(api, run["run_id"])
    assert view["status"] == "running" and view["ended_at"] is None
    assert view["counts"] == _counts(succeeded=1, assigned=1)
    tasks = {t["task_id"]: t for t in await _run_tasks(api, run["run_id"])}
    assert len(tasks) == 3  # the listing keeps the replaced task
    new = next(t for t in tasks.values() if t["rerun_of"] is not None)
    assert new["rerun_of"] == failed["task_id"] and tasks[failed["task_id"]]["replaced_by"] == new["task_id"]
    assert (new["goal"], new["device_id"], new["max_attempts"]) == ("flaky", "a1", 1)
    first = (await api.events(new["task_id"]))[0]
    assert (first["type"], first["actor"], first["actor_id"]) == ("created", "admin", "admin")
    # a second rerun finds nothing failed: the replaced task is no longer the run's
    nothing = await api.admin("POST", f"/api/v1/runs/{run['run_id']}/rerun-failed")
    assert nothing.json()["created"] == 0
    await _report(api, "host-a")
    ended = await _run(api, run["run_id"])
    assert ended["status"] == "succeeded" and ended["counts"] == _counts(succeeded=2)
    assert [e["status"] for e in await _feed(api, "run_ended")] == ["failed", "succeeded"]


# -- scopes and teams ----------------------------------------------------------------------


async def test_scopes_read_may_not_create_and_submit_cancels_and_reruns_only_its_own(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    reader = await _token(api, "reader", ["read"])
    refused = await _create_run(api, 403, headers=reader, tasks=[_goal("g")])
    assert refused["error"]["code"] == "insufficient_scope"
    ci, other = await _token(api, "ci", ["submit"]), await _token(api, "other-ci", ["submit"])
    mine = await _create_run(api, headers=ci, tasks=[_goal("g")])
    assert mine["created_by"] == "ci"
    for action, required in (("cancel", "control"), ("rerun-failed", "admin")):
        theirs = await api.client.post(f"/api/v1/runs/{mine['run_id']}/{action}", headers=other)
        assert theirs.status_code == 403 and theirs.json()["error"]["code"] == "insufficient_scope"
        assert theirs.json()["error"]["details"] == {"required": required}
        assert (await api.client.post(f"/api/v1/runs/{mine['run_id']}/{action}", headers=reader)).status_code == 403
    assert (await _run(api, mine["run_id"]))["cancel_requested"] is False
    own = await api.client.post(f"/api/v1/runs/{mine['run_id']}/cancel", headers=ci)
    assert own.status_code == 200 and own.json()["status"] == "cancelled"
    control = await _token(api, "ops", ["control"])
    second = await _create_run(api, headers=ci, tasks=[_goal("g")])
    assert (await api.client.post(f"/api/v1/runs/{second['run_id']}/rerun-failed", headers=control)).status_code == 403
    assert (await api.client.post(f"/api/v1/runs/{second['run_id']}/cancel", headers=control)).status_code == 200
    own_rerun = await api.client.post(f"/api/v1/runs/{second['run_id']}/rerun-failed", headers=ci)
    assert own_rerun.status_code == 201 and own_rerun.json()["created"] == 0
    assert (await api.client.get(f"/api/v1/runs/{second['run_id']}", headers=reader)).status_code == 200


async def test_a_team_tokens_runs_are_its_team_and_another_team_is_refused(api: Api) -> None:
    checkout = await _token(api, "checkout-ci", ["submit"], team="checkout")
    run = await _create_run(api, headers=checkout, tasks=[_goal("g")])
    assert run["team"] == "checkout"
    assert {t["team"] for t in await _run_tasks(api, run["run_id"])} == {"checkout"}
    refused = await _create_run(api, 403, headers=checkout, team="search", tasks=[_goal("g")])
    assert refused["error"]["code"] == "insufficient_scope"
    listed = (await api.admin("GET", "/api/v1/runs", params={"team": "checkout"})).json()["runs"]
    assert [r["run_id"] for r in listed] == [run["run_id"]]


# -- listing ------------------------------------------------------------------------------


async def test_runs_are_listed_newest_first_by_status_and_in_pages(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    made = [await _create_run(api, name=f"run-{i}", tasks=[_goal("g", device_id="a1")]) for i in range(3)]
    await api.admin("POST", f"/api/v1/runs/{made[1]['run_id']}/cancel")
    listed = (await api.admin("GET", "/api/v1/runs")).json()
    assert [r["run_id"] for r in listed["runs"]] == [r["run_id"] for r in reversed(made)]
    cancelled = (await api.admin("GET", "/api/v1/runs", params={"status": "cancelled"})).json()["runs"]
    assert [r["run_id"] for r in cancelled] == [made[1]["run_id"]]
    first = (await api.admin("GET", "/api/v1/runs", params={"limit": 2})).json()
    rest = (await api.admin("GET", "/api/v1/runs", params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert [r["run_id"] for r in first["runs"] + rest["runs"]] == [r["run_id"] for r in reversed(made)]
    for bad in ({"status": "queued"}, {"limit": 0}, {"team": "a b"}):
        assert (await api.admin("GET", "/api/v1/runs", params=bad)).status_code == 400
    assert (await api.admin("GET", "/api/v1/runs/r_nope")).status_code == 404
    assert (await api.admin("POST", "/api/v1/runs/r_nope/cancel")).status_code == 404


# -- listing and breakdown ---------------------------------------------------------------------


async def test_a_listing_carries_each_runs_summary_whatever_its_work_items(api: Api) -> None:
    # Two runs of 100 distinct 4,000-character goals: the listing answered 800 KB of breakdown.
    made = [await _create_run(api, tasks=[_goal(f"{run}-{i}-" + "x" * 3990, device_id="nowhere")
                                          for i in range(100)]) for run in range(2)]
    listed = await api.admin("GET", "/api/v1/runs", params={"limit": 2})
    assert listed.status_code == 200
    runs = listed.json()["runs"]
    assert [r["run_id"] for r in runs] == [m["run_id"] for m in reversed(made)]
    assert all("breakdown" not in r and r["counts"] == _counts(queued=100) for r in runs)
    assert len(listed.content) < 4_000
    for answer in made:
        assert "breakdown" not in answer and answer["counts"] == _counts(queued=100)


async def test_a_runs_breakdown_names_each_work_item_by_a_bounded_label(api: Api) -> None:
    from wire import RUN_WORK_LABEL_MAX_BYTES

    # Long goals alike but for their end, goals of multi-byte characters cut anywhere, a short one.
    alike = ["open settings and " + "then " * 790 + str(i) for i in range(3)]
    wide = ["é" * 3999 + "!", "€" * 2000, "😀" * 1000]
    goals = [*alike, *wide, "short goal"]
    run = await _create_run(api, tasks=[_goal(goal, device_id="nowhere") for goal in goals for _ in range(2)])
    shown = await _run(api, run["run_id"])
    rows = shown["breakdown"]["work"]
    assert len(rows) == len(goals)  # no two work items merged
    assert all(len(row["work"].encode()) <= RUN_WORK_LABEL_MAX_BYTES for row in rows)
    assert all(row["counts"] == _counts(queued=2) for row in rows)
    labels = {row["work"] for row in rows}
    assert "short goal" in labels
    assert sum(label.startswith("open settings and then") for label in labels) == 3
    assert {label[0] for label in labels} >= {"é", "€", "😀"}
    # the report still names each work item by its text
    report = (await api.admin("GET", f"/api/v1/runs/{run['run_id']}/report")).json()
    assert {suite["work"] for suite in report["suites"]} == set(goals)
    # the labels move with the tasks: cancelled, every one still sums to its two tasks
    await api.admin("POST", f"/api/v1/runs/{run['run_id']}/cancel")
    rows = (await _run(api, run["run_id"]))["breakdown"]["work"]
    assert len(rows) == len(goals) and all(row["counts"] == _counts(cancelled=2) for row in rows)


# -- retention -----------------------------------------------------------------------------


async def test_a_run_goes_with_the_last_of_its_tasks(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, task_retention_s=10) as api:
        await api.heartbeat("host-a", ["a1"])
        run = await _create_run(api, idempotency_key="once", tasks=[_goal("g", device_id="a1"),
                                                                    _goal("g", device_id="a1")])
        await api.admin("POST", f"/api/v1/runs/{run['run_id']}/cancel")
        store = api.ctx.store
        clock.advance(9_000)
        assert (await api.sweep())["purged"] == 0
        assert (await _run(api, run["run_id"]))["status"] == "cancelled"
        clock.advance(1_001)
        await api.sweep()  # (the app's own reaper may sweep too: what is left is what counts)
        assert (await api.admin("GET", f"/api/v1/runs/{run['run_id']}")).status_code == 404
        assert (await api.admin("GET", "/api/v1/runs")).json()["runs"] == []
        for key in (store.keys.run_counts(run["run_id"]), store.keys.run_tasks(run["run_id"])):
            assert await store.redis.exists(key) == 0
        assert await store.redis.hlen(store.keys.run_idempotency) == 0
        again = await _create_run(api, idempotency_key="once", tasks=[_goal("g", device_id="a1")])
        assert again["run_id"] != run["run_id"]


async def _junit_failures(api: Api, run_id: str) -> str:
    response = await api.admin("GET", f"/api/v1/runs/{run_id}/report", params={"format": "junit"})
    assert response.status_code == 200, response.text
    return ElementTree.fromstring(response.content).attrib["failures"]


async def test_a_task_of_a_run_is_kept_until_a_retention_after_the_run_ended(api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, task_retention_s=20) as api:
        await api.heartbeat("host-a", ["a1"])
        run = await _create_run(api, tasks=[_goal("first", device_id="a1", max_attempts=1),
                                            _goal("second", device_id="a1")])
        failed = await _report(api, "host-a", "failed", failure_reason="assertion_failed")
        clock.advance(21_000)  # past the failed task's own retention, while its run still runs
        assert (await api.sweep())["purged"] == 0
        assert (await api.task(failed["task_id"]))["status"] == "failed"
        assert await _junit_failures(api, run["run_id"]) == "1"
        await api.heartbeat("host-a", ["a1"])
        await _report(api, "host-a")  # the run ends now, failed
        assert (await _run(api, run["run_id"]))["status"] == "failed"
        clock.advance(19_000)  # 40 s after the failure, 19 s after the run ended
        assert (await api.sweep())["purged"] == 0
        assert await _junit_failures(api, run["run_id"]) == "1"
        assert [t["status"] for t in await _run_tasks(api, run["run_id"])] == ["succeeded", "failed"]
        clock.advance(1_001)  # a retention after the run ended: the run goes with its tasks
        await api.sweep()
        assert (await api.admin("GET", f"/api/v1/runs/{run['run_id']}")).status_code == 404
        assert (await api.admin("GET", f"/api/v1/tasks/{failed['task_id']}")).status_code == 404


async def test_rerun_failed_reruns_a_failure_older_than_the_retention_of_a_run_still_running(
        api_factory: Any) -> None:
    clock = ShiftedClock()
    async with api_factory(clock=clock, task_retention_s=20) as api:
        await api.heartbeat("host-a", ["a1"])
        run = await _create_run(api, tasks=[_goal("first", device_id="a1", max_attempts=1),
                                            _goal("second", device_id="a1")])
        failed = await _report(api, "host-a", "failed", failure_reason="assertion_failed")
        clock.advance(21_000)
        await api.sweep()
        rerun = await api.admin("POST", f"/api/v1/runs/{run['run_id']}/rerun-failed")
        assert rerun.status_code == 201 and rerun.json()["created"] == 1
        tasks = await _run_tasks(api, run["run_id"])
        assert [t["rerun_of"] for t in tasks if t["rerun_of"]] == [failed["task_id"]]


# -- metrics -------------------------------------------------------------------------------


async def test_metrics_count_runs_by_status(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    first = await _create_run(api, tasks=[_goal("g", device_id="a1")])
    await _create_run(api, tasks=[_goal("g", device_id="a1")])
    await api.admin("POST", f"/api/v1/runs/{first['run_id']}/cancel")
    text = (await api.client.get("/metrics")).text
    assert 'tether_runs{status="running"} 1.0' in text
    assert 'tether_runs{status="cancelled"} 1.0' in text
    assert 'tether_runs{status="succeeded"} 0.0' in text
