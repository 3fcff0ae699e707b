"""Fixtures of the browser tests: one headless Chromium for the session, a fresh tab (in its own
browser context) per test, a real coordinator process on real Redis per test, and real agents."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.chromium import Chromium, Page, find_chromium
from tests.support import (
    ADMIN,
    FAST_COORDINATOR,
    HOSTS,
    CoordinatorProcess,
    Process,
    agent_process,
    coordinator_env,
    fresh_prefix,
    running,
    wait_until,
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
def page(browser: Chromium) -> Iterator[Page]:
    tab = browser.new_page()
    try:
        yield tab
        assert tab.console_errors == [], "the page threw or logged errors"
    finally:
        tab.close()


class Coordinator(CoordinatorProcess):
    """The coordinator process, with the operator and host API calls the tests make."""

    def __init__(self, workdir: Path, prefix: str, **settings: str) -> None:
        super().__init__(coordinator_env(prefix, **{**FAST_COORDINATOR, **settings}), workdir)

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.api.request(method, path, **kwargs)
        assert response.status_code < 300, response.text
        return response.json()

    def mint(self, name: str, scopes: list[str]) -> str:
        """A new operator token's secret."""
        return self.call("POST", "/api/v1/operator-tokens", json={"name": name, "scopes": scopes, "ttl_s": 3600})["token"]

    def call_as(self, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.api.request(method, path, headers={"authorization": f"Bearer {token}"}, **kwargs)

    def heartbeat(self, host: str, devices: dict[str, str], **agent: str) -> None:
        """A host's snapshot: ``{device_id: status}``, all simulated; ``agent`` its agent's
        description (``hostname``, ``version``)."""
        body: dict[str, Any] = {"devices": [{"device_id": d, "driver": "sim", "status": s} for d, s in devices.items()]}
        if agent:
            body["agent"] = agent
        response = self.api.put(f"/internal/v1/hosts/{host}/heartbeat", json=body, headers=host_headers(host))
        assert response.status_code == 200, response.text

    def running_goal(self, host: str, device: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """A goal task on ``device``, claimed by ``host`` with the test as its agent: (task, lease)."""
        self.heartbeat(host, {device: "available"})
        task = self.call("POST", "/api/v1/tasks", json={"kind": "goal", "goal": "x", "device_id": device})
        lease = self.api.post(f"/internal/v1/hosts/{host}/claim?wait_s=0", headers=host_headers(host)).json()
        assert lease["task_id"] == task["task_id"]
        return task, lease


def host_headers(host: str) -> dict[str, str]:
    return {"authorization": f"Bearer {HOSTS[host]}"}


@pytest.fixture
def coordinator_settings() -> dict[str, str]:
    """Settings of the test's coordinator over FAST_COORDINATOR's; a test may parametrize it."""
    return {}


@pytest.fixture
def coordinator(tmp_path: Path, coordinator_settings: dict[str, str]) -> Iterator[Coordinator]:
    with fresh_prefix() as prefix, running(Coordinator(tmp_path, prefix, **coordinator_settings)) as coord:
        yield coord


@pytest.fixture
def workflows(tmp_path: Path) -> Path:
    folder = tmp_path / "workflows"
    folder.mkdir()
    steps = [{"action": "key", "key": "home"}] + [{"action": "wait", "ms": 700} for _ in range(5)]
    (folder / "slow.json").write_text(json.dumps({"name": "slow", "steps": steps}))
    # Steps of a known length: when each one starts is known from when the task was claimed.
    steady = [{"action": "wait", "ms": STEADY_STEP_MS} for _ in range(4)]
    (folder / "steady.json").write_text(json.dumps({"name": "steady", "steps": steady}))
    return folder


STEADY_STEP_MS = 2500


@pytest.fixture
def start_agent(tmp_path: Path, coordinator: Coordinator) -> Iterator[Callable[..., Process]]:
    """``start_agent(HOST_ID=..., ...)``: ``python -m agent`` as a legacy host (``HOST_AGENT_*``)."""
    agents: list[Process] = []

    def start(name: str = "agent", **settings: str) -> Process:
        agent = agent_process(coordinator.url, tmp_path / name, name, **{"SHUTDOWN_GRACE_S": "10", **settings})
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        agent.stop()


class Dashboard:
    """The page at /ui, read and driven the way a person would."""

    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.url = url

    def open(self) -> None:
        self.page.goto(f"{self.url}/ui")

    def sign_in(self, token: str = ADMIN) -> None:
        self.page.type_into("#token", token)
        self.page.press_enter()

    def open_signed_in(self, token: str = ADMIN) -> None:
        self.open()
        self.sign_in(token)
        self.page.wait_for("document.getElementById('feed-state').dataset.state === 'live'", what="the feed live")
        self.page.wait_for("!!document.querySelector('#hosts tbody tr[data-key]')", what="hosts shown")

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
def dashboard(page: Page, coordinator: Coordinator) -> Dashboard:
    return Dashboard(page, coordinator.url)
