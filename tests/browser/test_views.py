"""The dashboard as an application (issue 58), in real headless Chromium against a real coordinator
process on real Redis, at 1,024 and 1,600 px: views with addresses a link can share, long tables
paged with a count of what is hidden, filters that say so in the address, and the run's view with
its legend, its buttons and its reruns marked."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Dashboard
from tests.browser.driver import Chromium
from tests.browser.test_fit import OVERFLOWING, WIDTHS, set_width
from tests.support import CoordinatorProcess, wait_until

pytestmark = pytest.mark.e2e

PAGER = "document.getElementById('{}-pager').querySelector('.pager-text')?.textContent"


def shown(dashboard: Dashboard, table: str) -> list[str]:
    """The keys of the rows a person sees in ``table`` (not those another page holds)."""
    return dashboard.page.js(f"[...document.querySelectorAll('#{table} tbody tr[data-key]:not([hidden])')]"
                             ".map(r => r.dataset.key)")


def populate(coordinator: CoordinatorProcess) -> dict[str, list[str]]:
    """60 phones on host-a, 13 on host-b (labelled rack=b), and 120 tasks no device can run:
    70 of team alpha, 50 of beta. The queued tasks' ids by team, oldest first."""
    coordinator.heartbeat("host-a", [f"a-{n:02d}" for n in range(60)])
    coordinator.heartbeat("host-b", [{"device_id": f"b-{n:02d}", "labels": {"rack": "b"}} for n in range(13)])
    teams: dict[str, list[str]] = {"alpha": [], "beta": []}
    for n in range(120):
        team = "alpha" if n % 12 < 7 else "beta"
        task = coordinator.create_task(goal=f"Wait {n}", selector={"driver": "adb"}, team=team)
        teams[team].append(task["task_id"])
    return teams


@pytest.mark.parametrize("width", WIDTHS)
def test_views_have_addresses_and_long_tables_come_in_pages(
        coordinator: CoordinatorProcess, dashboard: Dashboard, browser: Chromium, width: int) -> None:
    teams = populate(coordinator)
    page = dashboard.page
    set_width(page, width)
    dashboard.open_signed_in()

    # Labels every device of a host carries (HOST_AGENT_LABELS) are shown as the host's.
    assert dashboard.wait_cell("hosts", "host-b", "Labels", lambda s: s == "rack=b", what="host-b's labels")
    assert dashboard.cell("hosts", "host-a", "Labels") == ""
    # The Fleet view first: 73 devices, a page of 30 shown, the rest counted.
    page.wait_for(f"{PAGER.format('devices')} === '1\u201330 of 73 · 43 hidden'", what="the devices' pager")
    assert len(shown(dashboard, "devices")) == 30
    page.click("#devices-pager button.older")
    page.wait_for(f"{PAGER.format('devices')} === '31\u201360 of 73 · 43 hidden'", what="the devices' second page")
    assert shown(dashboard, "devices")[-1] == "a-59"
    page.click("#devices-pager button.older")
    page.wait_for(f"{PAGER.format('devices')} === '61\u201373 of 73 · 60 hidden'", what="the devices' last page")
    assert shown(dashboard, "devices")[-1] == "b-12"
    # A filter of the Fleet view, in the address.
    dashboard.view("fleet", "host=host-b")
    page.wait_for(f"{PAGER.format('devices')} === '1\u201313 of 13 matching (73 in all) · 60 hidden'",
                  what="host-b's devices")

    # The Queue by its tab: the newest 50 of 120, the count of the rest from the teams' counts.
    page.click("#nav a[data-view=queue]")
    page.wait_for("location.hash === '#queue'", what="the queue's address")
    page.wait_for("!document.querySelector('section[data-view=queue]').hidden", what="the queue view")
    page.wait_for(f"{PAGER.format('queue')} === '1\u201350 of 120 · 70 hidden'", what="the queue's pager")
    newest = [*teams["alpha"], *teams["beta"]]
    page.wait_for("document.querySelector('section[data-view=fleet]').hidden", what="the fleet view hidden")
    first_page = shown(dashboard, "queue")
    assert len(first_page) == 50 and set(first_page) <= set(newest)
    page.click("#queue-pager button.older")
    page.wait_for(f"{PAGER.format('queue')} === '51\u2013100 of 120 · 70 hidden'", what="the queue's second page")
    assert not set(shown(dashboard, "queue")) & set(first_page)
    page.click("#queue-pager button.older")
    page.wait_for(f"{PAGER.format('queue')} === '101\u2013120 of 120 · 100 hidden'", what="the queue's last page")
    assert page.js("document.querySelector('#queue-pager button.older').hidden") is True

    # Filtered by team through the form: the address says so, and a new tab opened there shows it.
    page.js("document.getElementById('queue-team').value = 'beta'")
    page.click("section[data-view=queue] form.filters button[type=submit]")
    page.wait_for("location.hash === '#queue?team=beta'", what="the filter in the address")
    page.wait_for(f"{PAGER.format('queue')} === '1\u201350 of 50'", what="beta's queue")
    assert set(shown(dashboard, "queue")) == set(teams["beta"])
    assert {dashboard.cell("queue", task_id, "Team") for task_id in teams["beta"]} == {"beta"}

    assert page.js(OVERFLOWING) == [], f"the queue at {width} px"

    other = browser.new_tab()  # another person's tab, opened at the link
    try:
        set_width(other, width)
        other.goto(f"{coordinator.url}/ui#queue?team=alpha")
        Dashboard(other, coordinator.url).sign_in()
        other.wait_for(f"{PAGER.format('queue')} === '1\u201350 of 70 · 20 hidden'", what="alpha's queue from a shared link")
        assert other.js("document.getElementById('queue-team').value") == "alpha"
        assert other.js("document.querySelector('#nav a[aria-current=page]').dataset.view") == "queue"
        assert other.console_errors == []
    finally:
        other.close()


def finish(coordinator: CoordinatorProcess, host: str, lease: dict[str, Any], status: str) -> None:
    result = {"task_id": lease["task_id"], "attempt": lease["attempt"], "lease_id": lease["lease_id"],
              "status": status, "failure_reason": "assertion_failed" if status == "failed" else None, "metadata": {}}
    answer = coordinator.api.post(f"/internal/v1/hosts/{host}/results", json=result,
                                  headers=coordinator.host_headers(host))
    assert answer.status_code == 200, answer.text


CELLS = "document.querySelectorAll('#run-grid a.cell').length"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_run_view_is_full_width_with_its_legend_buttons_and_reruns(
        coordinator: CoordinatorProcess, dashboard: Dashboard, width: int) -> None:
    coordinator.heartbeat("host-b", [{"device_id": f"b-{n:02d}", "labels": {"rack": "b"}} for n in range(13)])
    run = coordinator.call("POST", "/api/v1/runs", json={
        "name": "nightly", "matrix": {"work": [{"kind": "goal", "goal": "Open Settings"}],
                                      "devices": {"driver": "sim", "labels": {"rack": "b"}}}})
    run_id = run["run_id"]
    failed = coordinator.claim("host-b")
    finish(coordinator, "host-b", failed, "failed")
    page = dashboard.page
    set_width(page, width)
    dashboard.open_signed_in()
    page.js(f"location.hash = '#run/{run_id}'")
    page.wait_for(f"{CELLS} === 13", what="the run's 13 cells")
    assert page.js("document.getElementById('detail').getBoundingClientRect().width") == width
    assert page.js("[...document.querySelectorAll('#run-legend li')].map(li => li.textContent)")[:2] == [
        "succeeded", "failed"]
    if width >= 1600:  # 13 devices across, without scrolling sideways
        assert page.js("(b => b.scrollWidth <= b.clientWidth)(document.querySelector('.run-grid-scroll'))") is True
    assert page.js(OVERFLOWING) == [], f"the run view at {width} px"

    # The JUnit report, saved through the page (the request carries the token).
    page.click("#run-actions button[data-action=junit]")
    page.wait_for("document.querySelector('#run-actions a.saved')?.href.startsWith('blob:')", what="the report saved")
    assert page.text("#run-actions a.saved") == f"{run_id}.xml"

    # Rerun failed: a new task in the failed one's place, its cell marked as a rerun.
    page.click("#run-actions button[data-action=rerun-failed]")
    page.wait_for("!!document.querySelector('#run-grid a.cell.rerun')", what="the rerun's cell")
    assert page.js("document.querySelector('#run-grid a.cell.rerun').dataset.rerunOf") == failed["task_id"]
    assert page.js(CELLS) == 13

    # Cancel: the run ends cancelled, and the button goes.
    page.click("#run-actions button[data-action=cancel]")
    wait_until(lambda: coordinator.call("GET", f"/api/v1/runs/{run_id}")["status"] == "cancelled", what="cancelled")
    page.wait_for("document.querySelector('#detail-body dd[data-key=status]')?.textContent === 'cancelled'",
                  what="the view's status")
    page.wait_for("document.querySelector('#run-actions button[data-action=cancel]').hidden", what="no Cancel")
