"""Fixtures of the browser tests: one headless Chromium for the session (driven by Playwright,
tests/browser/driver.py), a fresh tab (in its own browser context) per test, a real coordinator process on real Redis per test, and real agents."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.driver import Chromium, Tab, find_chromium
from tests.support import (
    ADMIN,
    FAST_COORDINATOR,
    CoordinatorProcess,
    coordinator_env,
    fresh_prefix,
    running,
    wait_until,
    write_workflows,
)


@pytest.fixture(scope="session")
def browser() -> Iterator[Chromium]:
    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (chromium, chromium-browser or google-chrome on the PATH, or "
                    "$CHROMIUM); .ci/run installs it")
    with Chromium(executable) as chromium:
        yield chromium


@pytest.fixture
def page(browser: Chromium) -> Iterator[Tab]:
    tab = browser.new_tab()
    try:
        yield tab
        assert tab.console_errors == [], "the page threw or logged errors"
    finally:
        tab.close()


def running_goal(coordinator: CoordinatorProcess, host: str, device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A goal task on ``device``, claimed by ``host`` with the test as its agent: (task, lease)."""
    coordinator.heartbeat(host, [device])
    task = coordinator.create_task(goal="x", device_id=device)
    lease = coordinator.claim(host)
    assert lease["task_id"] == task["task_id"]
    return task, lease


@pytest.fixture
def coordinator_settings() -> dict[str, str]:
    """Settings of the test's coordinator over FAST_COORDINATOR's; a test may parametrize it."""
    return {}


@pytest.fixture
def coordinator(tmp_path: Path, coordinator_settings: dict[str, str]) -> Iterator[CoordinatorProcess]:
    with fresh_prefix() as prefix, running(CoordinatorProcess(
            coordinator_env(prefix, **{**FAST_COORDINATOR, **coordinator_settings}), tmp_path)) as coord:
        yield coord


@pytest.fixture
def agent_url(coordinator: CoordinatorProcess) -> str:
    return coordinator.url


STEADY_STEP_MS = 2500


@pytest.fixture
def workflows(tmp_path: Path) -> Path:
    return write_workflows(tmp_path / "workflows", {
        "slow": [{"action": "key", "key": "home"}] + [{"action": "wait", "ms": 700} for _ in range(5)],
        # Steps of a known length: when each one starts is known from when the task was claimed.
        "steady": [{"action": "wait", "ms": STEADY_STEP_MS} for _ in range(4)],
    })


class Dashboard:
    """The page at /ui, read and driven the way a person would."""

    def __init__(self, page: Tab, url: str) -> None:
        self.page = page
        self.url = url

    def open(self) -> None:
        self.page.goto(f"{self.url}/ui")

    def sign_in(self, token: str = ADMIN) -> None:
        self.page.type_into("#token", token)
        self.page.press_enter()

    def open_signed_in(self, token: str = ADMIN) -> None:
        self.open()
        # A tab signed in before signs itself in again as it loads (app.js keeps the token in
        # sessionStorage, and hides the form once the token is checked): typing it again would
        # race that, with a second sign-in, and a person would not.
        saved = self.page.js("Object.values(sessionStorage)")
        if token not in saved:
            assert not saved, "this tab is signed in with another token"
            self.sign_in(token)
        self.page.wait_for("document.getElementById('feed-state').dataset.state === 'live'", what="the feed live")
        self.page.wait_for("!!document.querySelector('#hosts tbody tr[data-key]')", what="hosts shown")

    def view(self, name: str, query: str = "") -> None:
        """Show the view ``name`` (Fleet, Queue, …) by its address, as a click on its tab does."""
        self.page.js(f"location.hash = {json.dumps('#' + name + (('?' + query) if query else ''))}")
        self.page.wait_for(f"!document.querySelector('section[data-view={name}]').hidden", what=f"the {name} view")

    def cell(self, table: str, key: str, column: str) -> str | None:
        """The text of one cell: the row of ``key`` (a task, host or device id), the column titled ``column``."""
        return self.page.js(f"""(() => {{
            const table = document.getElementById({json.dumps(table)});
            const index = [...table.tHead.rows[0].cells].findIndex(c => c.textContent === {json.dumps(column)});
            const row = table.querySelector(`tbody tr[data-key="${{CSS.escape({json.dumps(key)})}}"]`);
            return row && index >= 0 ? row.cells[index].textContent : null;
        }})()""")

    def wait_cell(self, table: str, key: str, column: str, predicate: Callable[[str], bool],
                  timeout: float = 15.0, what: str = "") -> str:
        def ready() -> str | None:
            text = self.cell(table, key, column)
            return text if text is not None and predicate(text) else None

        return wait_until(ready, timeout, interval=0.02, what=what or f"{table} {key} {column}")

    def button(self, table: str, key: str, label: str) -> str:
        """A selector for the button labelled ``label`` in the row of ``key``."""
        index = self.page.js(f"""[...document.querySelectorAll(
            '#{table} tbody tr[data-key="' + CSS.escape({json.dumps(key)}) + '"] button')]
            .findIndex(b => b.textContent === {json.dumps(label)})""")
        assert index >= 0, f"no {label!r} button in {table} row {key}"
        return f'#{table} tbody tr[data-key="{key}"] button:nth-of-type({index + 1})'

    def buttons(self, table: str, key: str) -> list[str]:
        """The labels of the buttons in the row of ``key``."""
        return self.page.js(f"""[...document.querySelectorAll(
            '#{table} tbody tr[data-key="' + CSS.escape({json.dumps(key)}) + '"] button')].map(b => b.textContent)""")

    def rows(self, table: str) -> list[str]:
        return self.page.js(f"[...document.querySelectorAll('#{table} tbody tr[data-key]')].map(r => r.dataset.key)")


@pytest.fixture
def dashboard(page: Tab, coordinator: CoordinatorProcess) -> Dashboard:
    return Dashboard(page, coordinator.url)
