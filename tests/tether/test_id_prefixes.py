"""Every `tether` command taking a task id takes a unique prefix of it, as git does (issue 42,
seen 3: the demo prints `t_1caa8b9e`, which no command accepted); a prefix that starts several
ids is exit 2 naming them (PROTOCOL.md, the CLI rows). Against this module's own coordinator, so
every task listed is one these tests made."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import CoordinatorProcess
from tests.tether.conftest import tether_here
from tether import Client, TetherError
from tether.client import AMBIGUOUS_MATCHES_SHOWN


def _queued_tasks(coordinator: CoordinatorProcess, count: int) -> list[str]:
    """``count`` tasks that wait (for a device nobody has), oldest first."""
    return [coordinator.create_task(device_id="prefix-nowhere", queue_timeout_s=600)["task_id"]
            for _ in range(count)]


def _shortest_unique_prefix(task_id: str, others: list[str]) -> str:
    for length in range(3, len(task_id)):
        if not any(o != task_id and o.startswith(task_id[:length]) for o in others):
            return task_id[:length]
    raise AssertionError(f"{task_id} has no unique proper prefix")


def _all_task_ids(coordinator: CoordinatorProcess) -> list[str]:
    return [t["task_id"] for t in coordinator.call("GET", "/api/v1/tasks", params={"limit": 500})["tasks"]]


def test_each_task_command_takes_a_unique_prefix(coordinator: CoordinatorProcess,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    task_id = _queued_tasks(coordinator, 1)[0]
    prefix = _shortest_unique_prefix(task_id, _all_task_ids(coordinator))
    shown = tether_here(coordinator, capsys, "task", prefix)
    assert shown.code == 0 and task_id in shown.out, shown
    history = tether_here(coordinator, capsys, "--json", "events", prefix)
    assert history.code == 0 and history.json()["events"][0]["type"] == "created", history
    listed = tether_here(coordinator, capsys, "--json", "artifacts", prefix)
    assert listed.code == 0 and listed.json() == {"artifacts": []}, listed
    cancelled = tether_here(coordinator, capsys, "cancel", prefix)
    assert cancelled.code == 0 and cancelled.out.strip() == f"task {task_id}: cancelled", cancelled
    watched = tether_here(coordinator, capsys, "watch", prefix)  # over: the read alone reports it
    assert watched.code == 1 and task_id in watched.out and "cancelled" in watched.out, watched


def test_an_ambiguous_prefix_is_exit_2_naming_the_matches(coordinator: CoordinatorProcess,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # 17 ids of hex after "t_": two of them share their first digit (pigeonhole).
    made = _queued_tasks(coordinator, 17)
    first_digits = [t[:3] for t in made]
    prefix = next(p for p in first_digits if first_digits.count(p) > 1)
    sharing = [t for t in _all_task_ids(coordinator) if t.startswith(prefix)]
    for command in (["task"], ["events"], ["watch"], ["cancel"], ["artifacts"]):
        result = tether_here(coordinator, capsys, *command, prefix)
        assert result.code == 2 and result.out == "", (command, result)
        assert result.err.startswith(f"tether: '{prefix}' is the start of more than one task id: "), result.err
        assert "(ambiguous_id)" in result.err and len(result.err.splitlines()) == 1, result.err
        assert all(t in result.err for t in sharing[:AMBIGUOUS_MATCHES_SHOWN]), (sharing, result.err)
    # no cancel guessed one (of this test's tasks: an earlier test's may share the prefix, cancelled)
    assert all(coordinator.task(t)["status"] == "queued" for t in made if t.startswith(prefix))


def test_a_prefix_of_no_task_is_not_found_and_a_whole_id_needs_no_listing(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    result = tether_here(coordinator, capsys, "task", "t_zz")  # ids are hex: no task starts so
    assert result.code == 1 and "(not_found)" in result.err, result
    task_id = _queued_tasks(coordinator, 1)[0]
    with Client(coordinator.url, "unused-token-0123456789", transport=_only_get_of(task_id)) as client:
        assert client.resolve_task_id(task_id) == task_id


def _only_get_of(task_id: str) -> httpx.MockTransport:
    """A coordinator that knows one task, and fails the test if the listing is read."""
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == f"/api/v1/tasks/{task_id}", request.url
        return httpx.Response(200, json={"task_id": task_id})
    return httpx.MockTransport(answer)


def _listing(ids: list[str], page_size: int) -> httpx.MockTransport:
    """A coordinator whose tasks are ``ids`` (newest first), listed ``page_size`` at a time, that
    answers 404 to a GET of anything not in it."""
    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/tasks":
            start = int(request.url.params.get("cursor") or 0)
            end = start + page_size
            page: dict[str, Any] = {"tasks": [{"task_id": t} for t in ids[start:end]],
                                    "next_cursor": str(end) if end < len(ids) else None}
            return httpx.Response(200, json=page)
        task_id = path.removeprefix("/api/v1/tasks/")
        if task_id in ids:
            return httpx.Response(200, json={"task_id": task_id})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no such task"}})
    return httpx.MockTransport(answer)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.text("ab", min_size=1, max_size=5), unique=True, max_size=30),
       prefix=st.text("ab", min_size=1, max_size=5), page_size=st.integers(1, 7))
def test_a_prefix_resolves_exactly_when_one_id_is_it_or_starts_with_it(ids: list[str], prefix: str,
                                                                        page_size: int) -> None:
    with Client("http://coordinator", "unused-token-0123456789", transport=_listing(ids, page_size)) as client:
        starting = [t for t in ids if t.startswith(prefix)]
        if prefix in ids:
            assert client.resolve_task_id(prefix) == prefix  # an exact id wins, as in git
            return
        if len(starting) == 1:
            assert client.resolve_task_id(prefix) == starting[0]
            return
        with pytest.raises(TetherError) as raised:
            client.resolve_task_id(prefix)
    if not starting:
        assert raised.value.code == "not_found"
        return
    assert raised.value.code == "ambiguous_id"
    assert raised.value.details["matches"] == starting[:AMBIGUOUS_MATCHES_SHOWN]
    assert (" and more" in raised.value.message) == (len(starting) > AMBIGUOUS_MATCHES_SHOWN)


def _queued_runs(coordinator: CoordinatorProcess, count: int) -> list[str]:
    """``count`` runs of one task that waits (for a device nobody has)."""
    body = {"tasks": [{"kind": "goal", "goal": "g", "device_id": "prefix-nowhere", "queue_timeout_s": 600}]}
    return [coordinator.call("POST", "/api/v1/runs", json=body)["run_id"] for _ in range(count)]


def test_each_run_command_takes_a_unique_prefix_and_an_ambiguous_one_is_exit_2(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    made = _queued_runs(coordinator, 17)  # "r_" and hex: two share their first digit
    every = [r["run_id"] for r in coordinator.call("GET", "/api/v1/runs", params={"limit": 500})["runs"]]
    run_id = made[0]
    prefix = _shortest_unique_prefix(run_id, every)
    shown = tether_here(coordinator, capsys, "--json", "run", prefix)
    assert shown.code == 0 and shown.json()["run_id"] == run_id, shown
    reported = tether_here(coordinator, capsys, "--json", "run", "report", prefix)
    assert reported.code == 0 and reported.json()["run"]["run_id"] == run_id, reported
    cancelled = tether_here(coordinator, capsys, "--json", "run", "cancel", prefix)
    assert cancelled.code == 0 and cancelled.json()["status"] == "cancelled", cancelled

    shared = next(p for p in (r[:3] for r in made) if sum(r.startswith(p) for r in made) > 1)
    for command in (["run"], ["run", "cancel"], ["run", "rerun-failed"], ["run", "report"]):
        result = tether_here(coordinator, capsys, *command, shared)
        assert result.code == 2 and result.out == "", (command, result)
        assert result.err.startswith(f"tether: '{shared}' is the start of more than one run id: "), result.err
    assert all(coordinator.call("GET", f"/api/v1/runs/{r}")["status"] == "running"
               for r in made if r.startswith(shared) and r != run_id)  # run_id: cancelled above
