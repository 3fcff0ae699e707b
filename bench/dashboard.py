"""The dashboard at 1,000 devices: how long the page takes to show them, and how long a task event
takes from the coordinator to the screen.

    python -m bench.dashboard [--devices 1000] [--events 40] [--screenshot docs/dashboard.png]

A real coordinator process (real Redis at ``REDIS_URL``, default 127.0.0.1:6379, a fresh key
prefix) gets its pool from heartbeats of static hosts of 200 devices each, some running tasks
(claimed, with progress), waiting tasks and finished ones. Headless Chromium (driven as in
``tests/browser``) opens ``/ui`` and signs in; the page marks its own timings:

- ``load``: from the start of the dashboard (token checked) to every table shown, reading the
  lists over HTTP included;
- ``render``: of that, the time spent building the tables from the lists.

Event to screen: a renewal carries new progress; a MutationObserver in the page notes when the
device's Step cell shows it. The time is from just before the renewal is sent to that moment, on
the one machine's wall clock: the coordinator's script, the feed, the stream to the page, its
parsing, and the DOM update, all in it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.browser.chromium import Chromium, Page, find_chromium
from tests.support import ADMIN, CoordinatorProcess, coordinator_env, fresh_prefix

PER_HOST = 200
RUNNING = 50
LOADS = 5


class Fleet:
    """The coordinator's host and operator APIs, as the bench uses them."""

    def __init__(self, url: str, hosts: dict[str, str]) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        self.hosts = hosts
        self.admin = {"authorization": f"Bearer {ADMIN}"}

    def host(self, host_id: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.hosts[host_id]}"}

    def call(self, method: str, path: str, headers: dict[str, str], **kwargs: Any) -> Any:
        response = self.http.request(method, path, headers=headers, **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None

    def heartbeat(self, host_id: str, devices: list[str], busy: frozenset[str] = frozenset()) -> None:
        snapshot = [{"device_id": d, "driver": "sim", "status": "busy" if d in busy else "available",
                     "labels": {"rack": host_id}} for d in devices]
        self.call("PUT", f"/internal/v1/hosts/{host_id}/heartbeat", self.host(host_id), json={"devices": snapshot})

    def task(self, **body: Any) -> dict[str, Any]:
        return self.call("POST", "/api/v1/tasks", self.admin, json=body)

    def claim(self, host_id: str) -> dict[str, Any]:
        return self.call("POST", f"/internal/v1/hosts/{host_id}/claim?wait_s=0", self.host(host_id))

    def renew(self, host_id: str, lease: dict[str, Any], step: int, status: str, summary: str) -> None:
        body = {"task_id": lease["task_id"], "attempt": lease["attempt"],
                "progress": {"step_index": step, "status": status, "summary": summary}}
        self.call("POST", f"/internal/v1/hosts/{host_id}/leases/{lease['lease_id']}/renew", self.host(host_id),
                  json=body)

    def result(self, host_id: str, lease: dict[str, Any], status: str, reason: str | None = None) -> None:
        body = {"task_id": lease["task_id"], "attempt": lease["attempt"], "lease_id": lease["lease_id"],
                "status": status, "failure_reason": reason, "metadata": {"steps": 3}}
        self.call("POST", f"/internal/v1/hosts/{host_id}/results", self.host(host_id), json=body)


def populate(fleet: Fleet, devices: int) -> list[tuple[str, str, dict[str, Any]]]:
    """The pool, finished tasks, running tasks with progress, and waiting tasks. The running ones,
    as (host, device, lease)."""
    pool: dict[str, list[str]] = {}
    for i in range(devices):
        host = f"lab-{i // PER_HOST + 1}"
        pool.setdefault(host, []).append(f"{host}-phone-{i % PER_HOST:03d}")
    for host, ids in pool.items():
        fleet.heartbeat(host, ids)

    def run(host: str, device: str, what: dict[str, Any]) -> dict[str, Any]:
        fleet.task(device_id=device, **what)
        return fleet.claim(host)

    login = {"kind": "workflow", "workflow": {"name": "login-smoke", "params": {}}}
    for n, (status, reason) in enumerate([("succeeded", None), ("failed", "assertion_failed"),
                                          ("succeeded", None), ("failed", "element_not_found"),
                                          ("cancelled", "cancelled"), ("succeeded", None)]):
        host, device = "lab-1", pool["lab-1"][PER_HOST - 1 - n]
        fleet.result(host, run(host, device, login), status, reason)

    running = []
    goals = ["Turn on airplane mode", "Open Settings and check for updates", "Pair the watch"]
    for n in range(min(RUNNING, devices)):
        host = f"lab-{n % len(pool) + 1}"
        device = pool[host][n // len(pool)]
        lease = run(host, device, {"kind": "goal", "goal": goals[n % len(goals)]} if n % 2 else login)
        fleet.renew(host, lease, n % 6, "running", ["open app", "tap 'Sign in'", "type text (12 chars)",
                                                    "wait 500 ms", "assert text 'Welcome'", "key home"][n % 6])
        running.append((host, device, lease))

    busy = frozenset(device for _, device, _ in running)
    for host, ids in pool.items():
        fleet.heartbeat(host, ids, busy)  # as agents would report them
    fleet.call("POST", f"/api/v1/devices/{pool['lab-1'][9]}/disable", fleet.admin, json={"reason": "cracked screen"})
    fleet.task(kind="goal", goal="Check the camera", selector={"driver": "adb"})
    fleet.task(kind="goal", goal="Run the night build", selector={"driver": "sim", "labels": {"rack": "lab-9"}})
    for host, device, _ in running[:3]:
        fleet.task(kind="goal", goal="Next on a busy phone", device_id=device)
    return running


def load_times(page: Page, url: str, devices: int) -> tuple[list[float], list[float]]:
    loads, renders = [], []
    for _ in range(LOADS):
        page.goto(f"{url}/ui")  # the token is in the tab's sessionStorage after the first sign-in
        if page.js("!sessionStorage.getItem('tether.token')"):
            page.type_into("#token", ADMIN)
            page.press_enter()
        page.wait_for("performance.getEntriesByName('tether:ready').length > 0", 60, "the dashboard ready")
        shown = page.js("document.querySelectorAll('#devices tbody tr[data-key]').length")
        assert shown == devices, f"{shown} device rows, not {devices}"
        loads.append(page.js("performance.getEntriesByName('tether:load')[0].duration"))
        renders.append(page.js("performance.getEntriesByName('tether:render')[0].duration"))
    return loads, renders


def event_to_screen(page: Page, fleet: Fleet, running: list[tuple[str, str, dict[str, Any]]],
                    events: int) -> list[float]:
    page.wait_for("document.getElementById('feed-state').dataset.state === 'live'", 30, "the feed live")
    latencies = []
    for n in range(events):
        host, device, lease = running[n % len(running)]
        step = 100 + n
        page.js(f"""window.shown = new Promise((resolve) => {{
            const row = document.querySelector('#devices tr[data-key={json.dumps(device)}]');
            const step = [...document.querySelectorAll('#devices th')].findIndex(th => th.textContent === 'Step');
            const observer = new MutationObserver(() => {{
                if (row.cells[step].textContent === '{step}') {{
                    observer.disconnect();
                    resolve(performance.timeOrigin + performance.now());
                }}
            }});
            observer.observe(row, {{subtree: true, childList: true, characterData: true}});
        }}); true""")
        sent_ms = time.time() * 1000
        fleet.renew(host, lease, step, "running", f"step {step}")
        latencies.append(page.js("window.shown", timeout=10) - sent_ms)
    return latencies


def screenshot(page: Page, fleet: Fleet, path: Path) -> None:
    """The page with live events in its log, its device table filtered to ten rows."""
    page.wait_for("document.getElementById('feed-state').dataset.state === 'live'", 30, "the feed live")
    fleet.call("POST", "/api/v1/hosts/lab-5/drain", fleet.admin)
    task = fleet.task(kind="goal", goal="Record a screen capture", selector={"driver": "sim", "labels": {"rack": "lab-5"}})
    page.wait_for(f"document.getElementById('events').textContent.includes('{task['task_id']}')")
    page.wait_for("document.getElementById('queue-count').textContent === "
                  "document.querySelectorAll('#queue tbody tr[data-key]').length + ' waiting'")
    page.type_into("#device-filter", "lab-1-phone-00")
    page.wait_for("document.querySelectorAll('#devices tbody tr:not([hidden])').length === 10")
    page.js("document.activeElement.blur(); window.scrollTo(0, 0)")
    page.screenshot(path)
    print(f"screenshot: {path}")


def describe(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered):.1f} ms, p95 {p95:.1f} ms, max {ordered[-1]:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--screenshot", type=Path, help="save a PNG of the populated dashboard here")
    args = parser.parse_args()
    executable = find_chromium()
    if executable is None:
        print("no Chromium found (chromium, chromium-browser, google-chrome or $CHROMIUM)", file=sys.stderr)
        return 2

    hosts = {f"lab-{n + 1}": f"lab-{n + 1}-token-0123456789" for n in range(-(-args.devices // PER_HOST))}
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    with fresh_prefix(redis_url) as prefix:
        env = coordinator_env(prefix, REDIS_URL=redis_url, COORDINATOR_STATIC_HOSTS=json.dumps(hosts),
                              COORDINATOR_HOST_OFFLINE_AFTER_S="600", COORDINATOR_CLAIM_TIMEOUT_S="600",
                              COORDINATOR_LEASE_TTL_S="600",
                              COORDINATOR_REAPER_INTERVAL_S="1")
        coordinator = CoordinatorProcess(env)
        coordinator.start()
        fleet = Fleet(coordinator.url, hosts)
        try:
            started = time.monotonic()
            running = populate(fleet, args.devices)
            print(f"pool: {args.devices} devices on {len(hosts)} hosts, {len(running)} running tasks "
                  f"(set up in {time.monotonic() - started:.1f} s)")
            with Chromium(executable, window=(1400, 1000)) as browser:
                page = browser.new_page()
                loads, renders = load_times(page, coordinator.url, args.devices)
                print(f"render at {args.devices} devices (building the tables): {describe(renders)} over {LOADS} loads")
                print(f"load at {args.devices} devices (sign-in to every table shown, HTTP included): "
                      f"{describe(loads)}")
                if args.screenshot:
                    screenshot(page, fleet, args.screenshot)
                latencies = event_to_screen(page, fleet, running, args.events)
                print(f"progress event to screen (renewal sent -> Step cell changed): {describe(latencies)} "
                      f"over {len(latencies)} events")
        finally:
            fleet.http.close()
            coordinator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
