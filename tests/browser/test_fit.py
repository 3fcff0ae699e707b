"""The dashboard fits the window (issue 42): at 1,024 and 1,600 px no table of any view scrolls
sideways inside its panel, the task view (with a failure's error text, issue 58) and a device's
history fit theirs, the charts' labels keep their shape
as the window widens, a device running a task reads busy, the event log opens with the last few
events (issue 58: not "No events yet" after a quiet spell), and a
run whose quick steps were never reported says which ran between two reports. Real headless
Chromium against a real coordinator process on real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Dashboard
from tests.browser.driver import Tab
from tests.browser.picture import Fleet
from tests.support import CoordinatorProcess

pytestmark = pytest.mark.e2e

WIDTHS = (1024, 1600)
VIEWS = ("fleet", "queue", "runs", "teams", "sessions", "results", "events")

# Every box that could hide content sideways, with how far its content runs past it.
OVERFLOWING = """[...document.querySelectorAll('main .scroll, main section, #detail, #detail table')]
  .filter(el => el.offsetParent !== null && el.scrollWidth > el.clientWidth + 1)
  .map(el => `${el.tagName.toLowerCase()}#${el.id || el.closest('[id]')?.id}: ${el.scrollWidth} > ${el.clientWidth}`)"""


FACTS = """Object.fromEntries([...document.querySelectorAll('#detail dl.facts:first-of-type dt')]
    .map(dt => [dt.textContent, dt.nextElementSibling.textContent]))"""


def set_width(page: Tab, width: int) -> None:
    page.resize(width, 900)
    page.wait_for(f"window.innerWidth === {width}", what=f"the window at {width} px")


def tick_shape(page: Tab) -> float:
    """The width ÷ height of the waiting chart's "now" label as drawn on screen."""
    return float(page.js("""(() => {
        const tick = [...document.querySelectorAll('#chart-waiting text')].find(t => t.textContent === 'now');
        const box = tick.getBoundingClientRect();
        return box.width / box.height;
    })()"""))


def populate(coordinator: CoordinatorProcess) -> list[dict[str, Any]]:
    """Two hosts of six phones with long names, four running tasks with progress, four results
    (the second failed), one task queued behind a busy phone; a running phone's agent still says
    "available". The results' leases."""
    fleet = Fleet(coordinator)
    pool = {host: [f"{host}-phone-{n:03d}" for n in range(6)] for host in ("host-a", "host-b")}
    for host, ids in pool.items():
        fleet.heartbeat(host, ids, set())
    login = {"kind": "workflow", "workflow": {"name": "login-smoke", "params": {}}}
    finished = []
    for n in range(4):
        host = ("host-a", "host-b")[n % 2]
        lease = fleet.start(host, pool[host][5 - n // 2], login)
        fleet.finish(host, lease, "failed" if n == 1 else "succeeded", "assertion_failed" if n == 1 else None,
                     {"error": ERROR, "failed_step": 3} if n == 1 else None)
        finished.append(lease)
    busy = set()
    for n in range(4):
        host = ("host-a", "host-b")[n % 2]
        device = pool[host][n // 2]
        lease = fleet.start(host, device, {"kind": "goal", "goal": "Open Settings and check for updates, then go home"})
        fleet.renew(host, lease, n + 2)
        busy.add(device)
    busy.discard("host-a-phone-000")  # its agent has not said busy yet
    for host, ids in pool.items():
        fleet.heartbeat(host, ids, busy)
    coordinator.create_task(goal="Next on a busy phone, with a goal long enough to wrap", device_id="host-a-phone-000")
    return finished


ERROR = "text not on screen: 'Welcome back, a rather long greeting that has to wrap in the panel'"


def test_every_panel_fits_at_1024_and_1600_px_and_a_running_device_reads_busy(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    first, failed = populate(coordinator)[:2]
    page = dashboard.page
    set_width(page, WIDTHS[0])
    dashboard.open_signed_in()
    page.wait_for("document.querySelectorAll('#devices tbody tr[data-key]').length === 12", what="the devices")
    page.wait_for("document.querySelectorAll('#results tbody tr[data-key]').length === 4", what="the results")
    # What happened before the page opened: the last results are in the log at once.
    page.wait_for("document.querySelectorAll('#events li[data-type=result]').length >= 1", what="the recent events")
    assert page.js("document.querySelectorAll('#events li.empty').length") == 0
    assert dashboard.cell("devices", "host-a-phone-000", "State") == "busy"
    page.wait_for("document.getElementById('devices-count').textContent.includes('4 busy')", what="4 busy counted")
    page.wait_for("!!document.querySelector('#chart-waiting text')", what="the charts drawn")

    shapes = []
    for width in WIDTHS:
        set_width(page, width)
        page.js("location.hash = ''")
        page.wait_for(f"document.querySelector('#chart-waiting svg').viewBox.baseVal.width > {width // 3}",
                      what="the charts drawn at the new width")
        shapes.append(tick_shape(page))
        for view in VIEWS:
            dashboard.view(view)
            assert page.js(OVERFLOWING) == [], f"the {view} view at {width} px"
        page.js(f"location.hash = '#task/{failed['task_id']}'")
        page.wait_for(f"({FACTS})['Failure'] === 'assertion_failed'", what="the failed task's view")
        assert page.js(FACTS)["Error"] == f"step 3: {ERROR}"
        assert page.js(OVERFLOWING) == [], f"the failed task's view at {width} px"
        page.js(f"location.hash = '#task/{first['task_id']}'")
        page.wait_for("!!document.querySelector('#detail:not([hidden]) #task-timeline li.event[data-type=result]')",
                      what="the task view")
        assert page.js(OVERFLOWING) == [], f"the task view at {width} px"
        page.js("location.hash = '#device/host-b-phone-005'")
        page.wait_for("!!document.querySelector('#detail:not([hidden]) table tbody tr')", what="the device's history")
        assert page.js(OVERFLOWING) == [], f"the device's history at {width} px"
    assert abs(shapes[0] - shapes[1]) < 0.1 * shapes[0], f"the chart's labels change shape: {shapes}"

    coordinator.call("POST", "/api/v1/hosts/host-b/drain")
    page.wait_for("!!document.querySelector('#events li[data-type=host_draining]')", what="the drain event")
    assert page.js("document.querySelectorAll('#events li.empty').length") == 0


def test_steps_that_ran_between_two_reports_are_named_in_the_timeline(
    coordinator: CoordinatorProcess, dashboard: Dashboard
) -> None:
    fleet = Fleet(coordinator)
    fleet.heartbeat("host-a", ["host-a-phone-000"], set())
    lease = fleet.start("host-a", "host-a-phone-000", {"kind": "goal", "goal": "Nine quick steps"})
    for step in (0, 2, 5, 6):  # what the agent reported: steps 1, 3 and 4 came and went between
        fleet.renew("host-a", lease, step)
    fleet.finish("host-a", lease, "succeeded", None)
    dashboard.open_signed_in()
    dashboard.page.js(f"location.hash = '#task/{lease['task_id']}'")
    dashboard.page.wait_for("document.querySelectorAll('#task-timeline li.step').length === 4",
                            what="the four reported steps, replayed from the feed")
    timeline = dashboard.page.js("""[...document.querySelectorAll('#task-timeline li.step, #task-timeline li.gap')]
        .map(li => li.classList.contains('gap') ? `gap ${li.dataset.from}-${li.dataset.to}` : `step ${li.dataset.step}`)""")
    assert timeline == ["step 0", "gap 1-1", "step 2", "gap 3-4", "step 5", "step 6"]
    assert dashboard.page.text("#task-timeline li.gap[data-from='3'] .what") == "steps 3\u20134"
