"""The dashboard's teams panel and the queue's priority and team (PROTOCOL.md, "Sharing the fleet"),
in real headless Chromium against a real coordinator process on real Redis."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Dashboard
from tests.support import CoordinatorProcess

pytestmark = pytest.mark.e2e


def test_the_teams_panel_shows_share_held_queue_and_quota_and_follows_the_feed(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    coordinator.heartbeat("host-a", ["phone-1", "phone-2", "phone-3"])
    coordinator.call("PUT", "/api/v1/teams/release", json={"weight": 2})
    coordinator.call("PUT", "/api/v1/teams/nightly", json={"max_devices": 1})
    anywhere = {"selector": {"driver": "sim"}}
    nightly = [coordinator.create_task(team="nightly", **anywhere) for _ in range(3)]
    release = [coordinator.create_task(team="release", priority=10, **anywhere) for _ in range(3)]
    checkout = coordinator.create_task(team="checkout", **anywhere)
    dashboard.open_signed_in()

    # Three phones wanted by all three teams, nightly capped at one: max-min by weight gives
    # release 2 × 0.75, the others 0.75 each; nightly holds its one, release the other two.
    dashboard.wait_cell("teams", "release", "Held", lambda text: text == "2 of 1.5")
    assert dashboard.cell("teams", "nightly", "Held") == "1 of 0.8"
    assert dashboard.cell("teams", "nightly", "Quota") == "1 (at quota)"
    assert dashboard.cell("teams", "nightly", "Queued") == "2"
    assert dashboard.cell("teams", "checkout", "Held") == "0 of 0.8"
    assert dashboard.cell("teams", "release", "Weight") == "2"
    assert dashboard.cell("teams", "checkout", "Quota") == "none"

    waiting = next(t["task_id"] for t in release if coordinator.task(t["task_id"])["status"] == "queued")
    assert dashboard.cell("queue", waiting, "Priority") == "10"
    assert dashboard.cell("queue", waiting, "Team") == "release"
    assert dashboard.cell("queue", checkout["task_id"], "Priority") == "0"

    # Cancels are task events: the panel is read again, without a reload. With release's and
    # checkout's queues gone and one of release's phones freed, only nightly waits, at its quota.
    coordinator.call("POST", f"/api/v1/tasks/{waiting}/cancel")
    coordinator.call("POST", f"/api/v1/tasks/{checkout['task_id']}/cancel")
    dashboard.wait_cell("teams", "release", "Queued", lambda text: text == "0", what="release's queue after the cancel")
    placed = next(t["task_id"] for t in release if coordinator.task(t["task_id"])["status"] == "assigned")
    coordinator.call("POST", f"/api/v1/tasks/{placed}/cancel")
    dashboard.wait_cell("teams", "release", "Held", lambda text: text.startswith("1 of"), what="release's freed phone")
    queued = [t["task_id"] for t in nightly if coordinator.task(t["task_id"])["status"] == "queued"]
    assert len(queued) == 2
    dashboard.open_signed_in()  # a waiting reason moves with no event of its task: read afresh
    for task_id in queued:
        dashboard.wait_cell("queue", task_id, "Waiting reason", lambda text: text == "team_at_quota")
