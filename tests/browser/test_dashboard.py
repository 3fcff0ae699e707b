"""The dashboard at /ui in real headless Chromium, against a real coordinator process on real Redis
(and, for live progress, a real agent running a workflow). Every wait polls the page until what a
person would see is there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import Dashboard, running_goal
from tests.support import ADMIN, HOSTS, CoordinatorProcess, Process, wait_until
from tests.webhook_receiver import ALLOW_RECEIVERS_ENV, receiving

pytestmark = pytest.mark.e2e


def test_sign_in_shows_the_fleet_and_why_work_waits(coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", ["phone-1", {"device_id": "phone-2", "status": "busy"}])
    waiting = coordinator.create_task(goal="Open Settings", selector={"driver": "adb"})
    assigned = coordinator.create_task(goal="Turn on wifi", device_id="phone-1")
    dashboard.open_signed_in()

    assert dashboard.cell("hosts", "host-a", "State") == "online"
    assert dashboard.cell("hosts", "host-b", "State") == "offline"
    assert dashboard.rows("devices") == ["phone-1", "phone-2"]
    assert dashboard.cell("devices", "phone-2", "State") == "busy"
    dashboard.wait_cell("queue", waiting["task_id"], "Waiting reason", lambda t: t == "no_matching_device")
    assert dashboard.cell("queue", waiting["task_id"], "Candidates") == "0 matching"
    assert dashboard.cell("queue", assigned["task_id"], "Status") == "assigned"
    assert dashboard.cell("devices", "phone-1", "Task") == assigned["task_id"]

    # The token is in this tab only: not in a cookie, localStorage or the address.
    page = dashboard.page
    assert page.js("document.cookie") == ""
    assert page.js("localStorage.length") == 0
    assert ADMIN not in page.js("location.href")
    assert page.js("sessionStorage.getItem('tether.token')") == ADMIN
    page.click("#sign-out")
    page.wait_for("!document.getElementById('login').hidden")
    assert page.js("sessionStorage.length") == 0
    assert dashboard.rows("hosts") == []


def test_a_wrong_token_shows_an_error_and_no_data(coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", ["phone-1"])
    dashboard.open()
    dashboard.sign_in("not-the-admin-token")

    page = dashboard.page
    error = page.wait_for("!document.getElementById('login-error').hidden && "
                          "document.getElementById('login-error').textContent")
    assert "refused" in error
    assert page.js("document.getElementById('dashboard').hidden") is True
    assert dashboard.rows("hosts") == [] and dashboard.rows("devices") == []
    assert page.js("sessionStorage.length") == 0
    api_calls = [urlsplit(url).path for url in page.requests if "/api/" in url]
    assert api_calls == ["/api/v1/me"]  # the check of the token, and nothing after it


def test_a_running_workflow_s_progress_updates_live(
    coordinator: CoordinatorProcess, dashboard: Dashboard, start_agent: Callable[..., Process], workflows: Path
) -> None:
    start_agent(HOST_ID="host-a", TOKEN=HOSTS["host-a"], DEVICES="sim:phone-1", WORKFLOWS_DIR=str(workflows))
    dashboard.open_signed_in()
    dashboard.wait_cell("devices", "phone-1", "State", lambda s: s == "available", what="the agent's phone")
    page = dashboard.page
    page.js("window.sameDocument = true")  # gone if the page reloads

    task = coordinator.create_task(kind="workflow", workflow={"name": "slow"}, device_id="phone-1")
    seen: list[str] = []

    def step_shown(wanted: int) -> bool:
        step = dashboard.cell("devices", "phone-1", "Step")
        if step and (not seen or seen[-1] != step):
            seen.append(step)
        return bool(step) and int(step) >= wanted

    wait_until(lambda: step_shown(1), 15, interval=0.02, what="step 1 on the page")
    assert dashboard.cell("devices", "phone-1", "Task") == task["task_id"]
    assert dashboard.cell("devices", "phone-1", "Task status") == "running"
    assert dashboard.cell("devices", "phone-1", "Summary").startswith("wait 700 ms")
    wait_until(lambda: step_shown(4), 15, interval=0.02, what="step 4 on the page")
    assert len(seen) >= 3, seen  # several steps, each shown as it came

    dashboard.wait_cell("results", task["task_id"], "Outcome", lambda s: s == "succeeded", what="the result")
    assert dashboard.cell("devices", "phone-1", "Task") == ""
    assert page.js("window.sameDocument") is True


def test_an_operator_drains_a_host_and_disables_a_device(coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", ["phone-1"])
    dashboard.open_signed_in()
    page = dashboard.page

    page.click(dashboard.button("hosts", "host-a", "Drain"))
    wait_until(lambda: coordinator.call("GET", "/api/v1/hosts/host-a")["draining"], what="host-a draining")
    dashboard.wait_cell("hosts", "host-a", "State", lambda s: s == "draining")
    page.wait_for("!!document.querySelector('#events li[data-type=host_draining]')", what="the drain event")
    page.click(dashboard.button("hosts", "host-a", "Undrain"))
    wait_until(lambda: not coordinator.call("GET", "/api/v1/hosts/host-a")["draining"], what="host-a undrained")
    # The row gains its Start session button back once the page sees the host undrained: the
    # Disable button's place is read after that, not before (it was clicking Start session).
    dashboard.wait_cell("devices", "phone-1", "State", lambda s: s == "available")

    page.click(dashboard.button("devices", "phone-1", "Disable"))
    page.wait_for("document.getElementById('confirm').open")
    page.type_into("#confirm-reason", "cracked screen")
    page.click("#confirm-ok")
    device = wait_until(lambda: (d := coordinator.call("GET", "/api/v1/devices/phone-1"))["disabled"] and d,
                        what="phone-1 disabled")
    assert device["disabled_reason"] == "cracked screen"
    dashboard.wait_cell("devices", "phone-1", "Disabled because", lambda s: s == "cracked screen")
    assert dashboard.cell("devices", "phone-1", "State") == "disabled"


def test_nothing_is_requested_from_another_origin(coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", ["phone-1"])
    coordinator.create_task(goal="x", device_id="phone-1")
    dashboard.open_signed_in()
    dashboard.page.wait_for("!!document.querySelector('#queue tbody tr[data-key]')")

    origin = f"{coordinator.url}/"
    requests = dashboard.page.requests
    assert any(url.endswith("/api/v1/events") for url in requests)
    assert [url for url in requests if not url.startswith(origin)] == []


def test_the_page_resumes_after_the_coordinator_restarts(coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", ["phone-1"])
    dashboard.open_signed_in()
    page = dashboard.page
    page.js("window.sameDocument = true")
    before = coordinator.create_task(goal="before the restart", selector={"driver": "adb"})
    page.wait_for(f"document.getElementById('events').textContent.includes('{before['task_id']}')")

    coordinator.stop()
    page.wait_for("document.getElementById('feed-state').dataset.state !== 'live'", what="the feed lost")
    coordinator.start()  # the same port, the same Redis
    # Made before the page is back, most likely: it comes with the resumed stream (Last-Event-ID).
    task = coordinator.create_task(goal="after the restart", selector={"driver": "adb"})

    page.wait_for("document.getElementById('feed-state').dataset.state === 'live'", what="the feed back")
    page.wait_for(f"!!document.querySelector('#events li[data-type=created]')"
                  f" && document.getElementById('events').textContent.includes('{task['task_id']}')",
                  what="the new task's event")
    dashboard.wait_cell("queue", task["task_id"], "Waiting reason", lambda s: s == "no_matching_device")
    assert page.js("window.sameDocument") is True
    feeds = [headers for url, headers in page.sent if urlsplit(url).path == "/api/v1/events"]
    assert len(feeds) >= 2 and "Last-Event-ID" not in feeds[0] and all(h.get("Last-Event-ID") for h in feeds[1:]), feeds


@pytest.mark.parametrize("coordinator_settings", [{**ALLOW_RECEIVERS_ENV, "COORDINATOR_LEASE_TTL_S": "60"}])
def test_a_first_read_refused_is_said_and_retried_until_the_page_shows_everything(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    # A coordinator under load or restarting answers one of the page's first reads 503. The page
    # says so and reads everything again: the webhooks, which no event brings, come only that way.
    task, _ = running_goal(coordinator, "host-a", "phone-1")
    with receiving(default=200) as receiver:
        webhook = coordinator.call("POST", "/api/v1/webhooks", json={"url": receiver.url, "events": ["task.ended"]})
        page = dashboard.page
        dashboard.open()
        page.js("""(() => { const banner = document.getElementById('banner'); window.banners = [];
            new MutationObserver(() => banner.hidden || window.banners.push(banner.textContent))
                .observe(banner, { attributes: true, childList: true, characterData: true, subtree: true }); })()""")
        page.refuse_once("/api/v1/webhooks", 503, {"code": "unavailable", "message": "Redis is busy"},
                         {"Retry-After": "1"})
        dashboard.sign_in()
        page.wait_for("!document.getElementById('webhooks-section').hidden", what="the webhooks panel")
        dashboard.wait_cell("webhooks", webhook["id"], "Team", lambda s: s == "any", what="the webhook, read again")
        dashboard.wait_cell("devices", "phone-1", "Task", lambda s: s == task["task_id"], what="the running task")
        page.wait_for("document.getElementById('banner').hidden", what="the banner cleared by the read that worked")
        said = page.js("window.banners")
        assert any("Redis is busy" in text and "Retrying" in text for text in said), said
