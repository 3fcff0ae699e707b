"""A live session driven through the dashboard (issue 54, the dashboard), in real headless Chromium
against a real coordinator process on real Redis and a real agent with a sim phone: started from
the phone's row, a click on its screen taps there (in the device's pixels), a drag swipes, an
element's button taps it, the text box types, the keys press; a `read` token watches the same
screens from the feed without a control; End ends it, and its story shows the recording."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from tests.browser.conftest import Dashboard
from tests.browser.driver import Chromium, Tab
from tests.support import HOSTS, CoordinatorProcess, Process

pytestmark = pytest.mark.e2e

# The sim phone (agent/runtime/sim.py): 1080 x 1920, the Settings tile at (60, 400)-(500, 700).
SETTINGS_TILE = (280, 550)
RECORDING_PAGE = 50


def shown(page: Tab) -> str | None:
    """The command whose answer the session view shows (its screen drawn, its elements listed)."""
    command = page.js("document.getElementById('session-last')?.dataset.command || null")
    return str(command) if command else None


def next_answer(page: Tab, before: str | None, what: str) -> str:
    return str(page.wait_for(f"(c => c && c !== {json.dumps(before)} ? c : null)"
                         "(document.getElementById('session-last')?.dataset.command)", what=what))


def elements(page: Tab) -> list[str]:
    return list(page.js("[...document.querySelectorAll('#session-elements li')].map(li => li.textContent)"))


def press_screen(page: Tab, at: tuple[int, int], to: tuple[int, int] | None = None) -> None:
    """A real mouse press on the screen's picture at the device pixel ``at``, released there (a
    tap) or at ``to`` (a drag): the page scales the picture's points to the device's."""
    box = page.js("""(() => { const i = document.getElementById('session-screen');
        i.scrollIntoView({block: 'center'}); const r = i.getBoundingClientRect();
        return [r.x, r.y, r.width, r.height, Number(i.dataset.width), Number(i.dataset.height)]; })()""")
    left, top, width, height, device_width, device_height = box

    def point(x: int, y: int) -> tuple[float, float]:
        return left + (x + 0.5) * width / device_width, top + (y + 0.5) * height / device_height

    page.drag(point(*at), point(*(to or at)))


def click_element(page: Tab, name: str) -> None:
    index = page.js(f"[...document.querySelectorAll('#session-elements button')].findIndex(b => b.textContent === {json.dumps(name)})")
    assert index >= 0, f"no element {name!r}: {elements(page)}"
    page.click(f'#session-elements li:nth-child({index + 1}) button')


def test_a_session_is_driven_from_the_dashboard_watched_by_a_read_token_and_recorded(
    coordinator: CoordinatorProcess, dashboard: Dashboard, browser: Chromium, start_agent: Callable[..., Process]
) -> None:
    start_agent(HOST_ID="host-a", TOKEN=HOSTS["host-a"], DEVICES="sim:phone-1")
    tester = coordinator.mint("tester", ["read", "submit"])
    wall = coordinator.mint("wall", ["read"])
    dashboard.open_signed_in(tester)
    page = dashboard.page
    dashboard.wait_cell("devices", "phone-1", "State", lambda s: s == "available", what="the agent's phone")

    # Started from the free phone's row: its live view opens, and the first look at it shows.
    page.click(dashboard.button("devices", "phone-1", "Start session"))
    task_id = page.wait_for("(m => m && decodeURIComponent(m[1]))(/^#sessions\\?task=(.+)$/.exec(location.hash))",
                            what="the session's view")
    page.wait_for("document.querySelector('#session')?.dataset.role === 'driver'", what="the driver's view")
    first = next_answer(page, None, "the first screen")
    assert {"Settings", "Notes"} <= set(elements(page)), elements(page)
    # The sim's picture is smaller than the phone: points are scaled to the device's own pixels.
    assert page.js("(i => i.naturalWidth > 0 && i.dataset.width)(document.getElementById('session-screen'))") == "1080"
    assert re.fullmatch(r"Ends if idle in \d+:\d\d", page.text("#session-idle") or ""), page.text("#session-idle")

    # A click on the picture taps the device where the picture shows it: Settings opens.
    press_screen(page, SETTINGS_TILE)
    tapped = next_answer(page, first, "the screen after the tap")
    assert "Wi-Fi" in elements(page), elements(page)
    sent = coordinator.call("GET", f"/api/v1/tasks/{task_id}/commands/{tapped}?wait_s=0")
    assert sent["action"] == {"action": "tap", "x": SETTINGS_TILE[0], "y": SETTINGS_TILE[1], "observe": True}, sent["action"]
    assert sent["actor"] == "tester" and sent["status"] == "done"

    # A watcher with `read` opens the same session: the same screen, from the history, no control.
    watcher_page = browser.new_tab()
    try:
        watcher = Dashboard(watcher_page, coordinator.url)
        watcher.open_signed_in(wall)
        watcher_page.js(f"location.hash = {json.dumps('#sessions?task=' + task_id)}")
        watcher_page.wait_for("document.querySelector('#session')?.dataset.role === 'watcher'", what="the watcher's view")
        watcher_page.wait_for(f"document.getElementById('session-last').dataset.command === {json.dumps(tapped)}",
                              what="the watcher seeing the driver's screen")
        assert watcher_page.js("document.getElementById('session-screen').dataset.command") == tapped
        assert watcher_page.js("!document.getElementById('session-controls') && "
                               "document.querySelectorAll('#session button, #session input').length === 0")
        assert "Wi-Fi" in elements(watcher_page)

        # The keys, an element's button, the text box: each answer reaches the watcher by the feed.
        page.click('#session-controls button[data-key="home"]')
        home = next_answer(page, tapped, "home")
        next_answer(watcher_page, tapped, "home, on the watcher's screen")
        assert shown(watcher_page) == home
        click_element(page, "Notes")
        notes = next_answer(page, home, "the Notes app")
        click_element(page, "notes:id/editor")
        focused = next_answer(page, notes, "the editor focused")
        page.type_into("#session-text", "hello")
        page.js("document.getElementById('session-type').requestSubmit()")
        typed = next_answer(page, focused, "the text typed")
        assert "hello" in elements(page), elements(page)
        watcher_page.wait_for(f"document.getElementById('session-last').dataset.command === {json.dumps(typed)}",
                              what="the typed text on the watcher's screen")
        assert "hello" in elements(watcher_page)

        # A drag is a swipe, from where it was pressed to where it was let go.
        press_screen(page, (540, 1600), (540, 400))
        swiped = next_answer(page, typed, "the swipe")
        action = coordinator.call("GET", f"/api/v1/tasks/{task_id}/commands/{swiped}?wait_s=0")["action"]
        assert action == {"action": "swipe", "x1": 540, "y1": 1600, "x2": 540, "y2": 400, "duration_ms": 300,
                          "observe": True}, action

        # More than a page of the recording (recording.js reads 50 at a time): quick commands, no
        # screen, sent by the admin through the API.
        for _ in range(RECORDING_PAGE - 6):
            coordinator.call("POST", f"/api/v1/tasks/{task_id}/commands?wait_s=30",
                             json={"action": {"action": "wait", "ms": 0, "observe": False}})

        # End: both views say it ended, and the controls are gone.
        page.click("#session-end")
        for tab in (page, watcher_page):
            tab.wait_for("document.querySelector('#session')?.dataset.status === 'succeeded'", what="the end")
        assert "(ended)" in (page.text("#session-status") or "")
        assert page.js("document.getElementById('session-controls').hidden") is True
        assert watcher_page.console_errors == [], "the watcher's page threw or logged errors"
    finally:
        watcher_page.close()

    # The story: every command, who sent it, its answer and its screen, in the order sent.
    page.click('#session-status a[href^="#task/"]')
    page.wait_for(f"document.getElementById('detail-title').textContent === 'Task {task_id}'")
    recorded = coordinator.call("GET", f"/api/v1/tasks/{task_id}/commands")["commands"]
    ids = [c["command_id"] for c in recorded]
    assert ids[:7] == [first, tapped, home, notes, focused, typed, swiped] and len(ids) == RECORDING_PAGE + 1, ids
    page.wait_for(f"document.querySelectorAll('#recording li[data-command]').length === {RECORDING_PAGE}",
                  what="the recording's first page")
    page.click("#recording-more")
    page.wait_for(f"document.querySelectorAll('#recording li[data-command]').length === {len(ids)}", what="all of it")
    assert page.js("document.getElementById('recording-more').hidden") is True
    rows = page.js("""[...document.querySelectorAll('#recording li')].map(li =>
        [li.dataset.command, li.querySelector('.who').textContent, li.querySelector('.what').textContent,
         li.querySelector('.answer').textContent.split(' · ')[0]])""")
    assert [r[0] for r in rows] == ids
    # Who sent each: the tester on the page, then the admin (who may drive any session) by the API.
    assert [r[1] for r in rows] == ["tester"] * 7 + ["admin"] * (RECORDING_PAGE - 6), rows
    assert {r[3] for r in rows} == {"done"}, rows
    assert [r[2] for r in rows] == ["observe", "tap 280, 550", "key home", "tap 800, 550", "tap 540, 370",
                                    'type "hello"', "swipe 540, 1600 → 540, 400",
                                    *["wait 0 ms"] * (RECORDING_PAGE - 6)], rows
    # The timeline keeps the session's transitions; its commands are the recording's.
    timeline = page.js("[...document.querySelectorAll('#task-timeline li.event')].map(li => li.dataset.type)")
    assert timeline[:3] == ["created", "assigned", "claimed"] and "command" not in timeline, timeline
    # A screen on each command that asked for one (the quick ones did not).
    assert page.js("document.querySelectorAll('#recording .shot').length") == 7
    page.wait_for("[...document.querySelectorAll('#recording img')].filter(i => i.naturalWidth > 0).length === 7",
                  what="every command's screen drawn")
