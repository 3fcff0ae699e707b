"""The dashboard signed in with operator tokens of each scope, in real headless Chromium against a
real coordinator: it offers only the actions the token may take, says who is signed in, names
the actor of each event, and shows the coordinator's own message when an action is refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Dashboard
from tests.support import CoordinatorProcess, wait_until

pytestmark = pytest.mark.e2e

# Buttons that act on the fleet (a view's filters and pages only read: every token has them).
NO_CONTROL = ("document.querySelectorAll('#dashboard button:not(form.filters button):not(.pager button), "
              "#dashboard th:empty').length")


def task(coordinator: CoordinatorProcess, token: str | None = None, **target: Any) -> dict[str, Any]:
    return coordinator.create_task(token=token, goal="Open Settings", **target)


def test_a_read_token_watches_and_finds_no_control(coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", ["phone-1"])
    waiting = task(coordinator, selector={"driver": "adb"})
    assigned = task(coordinator, device_id="phone-1")  # a device with a task: the admin could cancel it
    token = coordinator.mint("wall-screen", ["read"])

    dashboard.open_signed_in(token)
    page = dashboard.page
    dashboard.wait_cell("queue", waiting["task_id"], "Status", lambda s: s == "queued")
    dashboard.wait_cell("devices", "phone-1", "Task", lambda s: s == assigned["task_id"])
    # Not one button, nor an empty column where buttons would be.
    assert page.js(NO_CONTROL) == 0
    assert page.text("#who") == "wall-screen · read"
    assert page.js("sessionStorage.getItem('tether.token')") == token

    # The fleet changes under it, by someone else's hand: the feed says whose.
    coordinator.call("POST", "/api/v1/hosts/host-a/drain")
    line = page.wait_for("document.querySelector('#events li[data-type=host_draining]')?.textContent",
                         what="the drain event")
    assert line.endswith("by admin"), line
    assert page.js("document.querySelector('#events li[data-type=host_draining]').title") == "actor_id admin"
    dashboard.wait_cell("hosts", "host-a", "State", lambda s: s == "draining")
    assert page.js(NO_CONTROL) == 0


def test_a_control_token_drains_and_disables_but_may_not_revoke(coordinator: CoordinatorProcess,
                                                               dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", ["phone-1", "phone-2"])
    assigned = task(coordinator, device_id="phone-1")
    waiting = task(coordinator, selector={"driver": "adb"})
    token = coordinator.mint("on-call", ["read", "control"])

    dashboard.open_signed_in(token)
    page = dashboard.page
    dashboard.wait_cell("devices", "phone-1", "Task", lambda s: s == assigned["task_id"])
    dashboard.wait_cell("queue", waiting["task_id"], "Status", lambda s: s == "queued")
    assert dashboard.buttons("hosts", "host-a") == ["Drain"]  # no Revoke: that is admin's
    assert page.text("#who") == "on-call · read, control"
    assert dashboard.buttons("devices", "phone-1") == ["Cancel task", "Disable"]
    assert dashboard.buttons("devices", "phone-2") == ["Disable"]
    assert dashboard.buttons("queue", waiting["task_id"]) == ["Cancel"]  # any task, not only its own

    page.click(dashboard.button("hosts", "host-a", "Drain"))
    wait_until(lambda: coordinator.call("GET", "/api/v1/hosts/host-a")["draining"], what="host-a draining")
    dashboard.wait_cell("hosts", "host-a", "State", lambda s: s == "draining")
    line = page.wait_for("document.querySelector('#events li[data-type=host_draining]')?.textContent",
                         what="the drain event")
    assert line.endswith("by on-call"), line
    # Its token's id in the line's tooltip: another live token may be named on-call too.
    on_call_id = next(t["id"] for t in coordinator.call("GET", "/api/v1/operator-tokens")["operator_tokens"]
                      if t["name"] == "on-call")
    assert page.js("document.querySelector('#events li[data-type=host_draining]').title") == f"actor_id {on_call_id}"
    assert dashboard.buttons("hosts", "host-a") == ["Undrain"]

    page.click(dashboard.button("devices", "phone-2", "Disable"))
    page.wait_for("document.getElementById('confirm').open")
    page.type_into("#confirm-reason", "cracked screen")
    page.click("#confirm-ok")
    wait_until(lambda: coordinator.call("GET", "/api/v1/devices/phone-2")["disabled"], what="phone-2 disabled")
    dashboard.wait_cell("devices", "phone-2", "State", lambda s: s == "disabled")
    assert page.js("document.getElementById('action-error').hidden") is True


def test_a_submit_token_is_offered_its_own_tasks_and_a_refusal_shows_the_server_s_message(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    coordinator.heartbeat("host-a", ["phone-1"])
    # Rotation: the old "ci" token made a task, was revoked, and a new "ci" token took its place.
    # Both are "ci" on the page, but the coordinator knows the old one's task is not the new one's.
    old = coordinator.mint("ci", ["read", "submit"])
    theirs = task(coordinator, old, selector={"driver": "adb"})
    old_id = next(t["id"] for t in coordinator.call("GET", "/api/v1/operator-tokens")["operator_tokens"]
                  if t["name"] == "ci")
    coordinator.call("DELETE", f"/api/v1/operator-tokens/{old_id}")
    new = coordinator.mint("ci", ["read", "submit"])
    mine = task(coordinator, new, selector={"driver": "adb"})
    admins = task(coordinator, selector={"driver": "adb"})

    dashboard.open_signed_in(new)
    page = dashboard.page
    dashboard.wait_cell("queue", admins["task_id"], "Status", lambda s: s == "queued")
    assert page.text("#who") == "ci · read, submit"
    assert dashboard.cell("queue", mine["task_id"], "By") == "ci"
    assert dashboard.cell("queue", admins["task_id"], "By") == "admin"
    assert dashboard.buttons("queue", mine["task_id"]) == ["Cancel"]
    assert dashboard.buttons("queue", admins["task_id"]) == []
    assert dashboard.buttons("queue", theirs["task_id"]) == ["Cancel"]  # the page goes by name
    assert dashboard.buttons("hosts", "host-a") == [] and dashboard.buttons("devices", "phone-1") == []

    dashboard.view("queue")
    page.click(dashboard.button("queue", theirs["task_id"], "Cancel"))
    page.wait_for("document.getElementById('confirm').open")
    page.click("#confirm-ok")
    shown = page.wait_for("!document.getElementById('action-error').hidden && "
                          "document.getElementById('action-error').textContent", what="the refusal")
    refusal = coordinator.api.post(f"/api/v1/tasks/{theirs['task_id']}/cancel",
                                   headers={"authorization": f"Bearer {new}"})
    assert refusal.status_code == 403
    assert shown == f"That did not work: {refusal.json()['error']['message']}"
    assert coordinator.call("GET", f"/api/v1/tasks/{theirs['task_id']}")["status"] == "queued"

    page.click(dashboard.button("queue", mine["task_id"], "Cancel"))
    page.wait_for("document.getElementById('confirm').open")
    page.click("#confirm-ok")
    wait_until(lambda: coordinator.call("GET", f"/api/v1/tasks/{mine['task_id']}")["status"] == "cancelled",
               what="its own task cancelled")
    page.wait_for("document.getElementById('action-error').hidden", what="the refusal cleared")


def test_a_token_that_may_not_read_is_told_so_at_sign_in(coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    token = coordinator.mint("ci-only", ["submit"])
    dashboard.open()
    dashboard.sign_in(token)
    page = dashboard.page
    error = page.wait_for("!document.getElementById('login-error').hidden && "
                          "document.getElementById('login-error').textContent")
    assert "ci-only" in error and "needs read" in error
    assert page.js("document.getElementById('dashboard').hidden") is True
    assert page.js("sessionStorage.length") == 0
