"""The dashboard's picture in the README, docs/dashboard.png, taken from a real fleet:

    .venv/bin/python -m tests.browser.picture docs/dashboard.png [--minutes 3]

A real coordinator process (real Redis at ``REDIS_URL``, default 127.0.0.1:6379, a fresh key
prefix) gets 1,000 devices from heartbeats of five static hosts (``lab-1`` .. ``lab-5``, named
``lab-N.berlin.example`` by their agents); tasks finish in waves a minute apart (so the chart of
tasks finished per minute has more than one bar), 50 run with progress, some wait, one device is
disabled, and ``lab-5`` drains. Headless Chromium (``tests/browser/driver.py``) signs in,
filters the devices to one per host, and takes the whole page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tests.browser.driver import Chromium, find_chromium
from tests.support import (
    ADMIN,
    CoordinatorProcess,
    coordinator_env,
    fresh_prefix,
    running,
)

PER_HOST = 200
HOSTS = {f"lab-{n}": f"lab-{n}-token-0123456789" for n in range(1, 6)}
RUNNING = 50
STEPS = ["open app", "tap 'Sign in'", "type text (12 chars)", "wait 500 ms", "assert text 'Welcome'", "key home"]


class Fleet:
    """The picture's hosts, spoken for over the host API of ``coordinator``."""

    def __init__(self, coordinator: CoordinatorProcess) -> None:
        self.coordinator = coordinator
        self.call = coordinator.call
        self.create_task = coordinator.create_task

    def host_call(self, host: str, path: str, **kwargs: Any) -> Any:
        response = self.coordinator.api.post(path, headers=self.coordinator.host_headers(host), **kwargs)
        assert response.status_code == 200, response.text
        return response.json()

    def heartbeat(self, host: str, devices: list[str], busy: set[str]) -> None:
        self.coordinator.heartbeat(host, [{"device_id": d, "status": "busy" if d in busy else "available",
                                           "labels": {"rack": host}} for d in devices],
                                   agent={"hostname": f"{host}.berlin.example", "version": "0.9.0"})

    def start(self, host: str, device: str, what: dict[str, Any]) -> dict[str, Any]:
        self.coordinator.create_task(device_id=device, **what)
        return self.coordinator.claim(host)

    def renew(self, host: str, lease: dict[str, Any], step: int) -> None:
        body = {"task_id": lease["task_id"], "attempt": lease["attempt"],
                "progress": {"step_index": step, "status": "running", "summary": STEPS[step % len(STEPS)]}}
        self.host_call(host, f"/internal/v1/hosts/{host}/leases/{lease['lease_id']}/renew", json=body)

    def finish(self, host: str, lease: dict[str, Any], status: str, reason: str | None,
               metadata: dict[str, Any] | None = None) -> None:
        body = {"task_id": lease["task_id"], "attempt": lease["attempt"], "lease_id": lease["lease_id"],
                "status": status, "failure_reason": reason, "metadata": {"steps": 6, **(metadata or {})}}
        self.host_call(host, f"/internal/v1/hosts/{host}/results", json=body)


LOGIN = {"kind": "workflow", "workflow": {"name": "login-smoke", "params": {}}}
OUTCOMES = [("succeeded", None)] * 5 + [("failed", "assertion_failed"), ("succeeded", None), ("cancelled", "cancelled")]


def populate(fleet: Fleet, minutes: int) -> None:
    pool = {host: [f"{host}-phone-{i:03d}" for i in range(PER_HOST)] for host in HOSTS}
    for host, ids in pool.items():
        fleet.heartbeat(host, ids, set())
    for wave in range(minutes):  # finished work, a minute apart
        if wave:
            time.sleep(60)
        for n in range(3 + 2 * wave):
            host = f"lab-{n % 4 + 1}"
            device = pool[host][PER_HOST - 1 - n // 4]
            status, reason = OUTCOMES[(n + wave) % len(OUTCOMES)]
            fleet.finish(host, fleet.start(host, device, LOGIN), status, reason)
    busy: set[str] = set()
    goals = ["Turn on airplane mode", "Open Settings and check for updates", "Pair the watch"]
    for n in range(RUNNING):
        host = f"lab-{n % len(pool) + 1}"
        device = pool[host][n // len(pool)]
        lease = fleet.start(host, device, {"kind": "goal", "goal": goals[n % 3]} if n % 2 else LOGIN)
        fleet.renew(host, lease, n % 6)
        busy.add(device)
    for host, ids in pool.items():
        fleet.heartbeat(host, ids, busy)  # as agents would report them
    fleet.call("POST", "/api/v1/devices/lab-1-phone-190/disable", json={"reason": "cracked screen"})


def while_watched(fleet: Fleet) -> None:
    """What happens once the page is open, so its log of live events shows it."""
    fleet.create_task(goal="Check the camera", selector={"driver": "adb"})
    fleet.call("POST", "/api/v1/hosts/lab-5/drain")
    fleet.create_task(goal="Record a screen capture", selector={"driver": "sim", "labels": {"rack": "lab-5"}})
    for device in ["lab-1-phone-000", "lab-2-phone-000"]:
        fleet.create_task(goal="Next on a busy phone", device_id=device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--minutes", type=int, default=3, help="waves of finished work, a minute apart")
    args = parser.parse_args()
    executable = find_chromium()
    if executable is None:
        print("no Chromium found (chromium, chromium-browser, google-chrome or $CHROMIUM)", file=sys.stderr)
        return 2
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    with fresh_prefix(redis_url) as prefix:
        env = coordinator_env(prefix, REDIS_URL=redis_url, COORDINATOR_STATIC_HOSTS=json.dumps(HOSTS),
                              COORDINATOR_HOST_OFFLINE_AFTER_S="900", COORDINATOR_CLAIM_TIMEOUT_S="900",
                              COORDINATOR_LEASE_TTL_S="900")
        with running(CoordinatorProcess(env)) as coordinator:
            fleet = Fleet(coordinator)
            populate(fleet, args.minutes)
            with Chromium(executable, window=(1400, 1000)) as browser:
                page = browser.new_tab()
                page.goto(f"{coordinator.url}/ui")
                page.type_into("#token", ADMIN)
                page.press_enter()
                page.wait_for("document.getElementById('feed-state').dataset.state === 'live'", 60, "the feed live")
                page.wait_for("document.querySelectorAll('#devices tbody tr[data-key]').length === 1000", 60)
                page.wait_for("document.querySelector('#chart-finished svg').dataset.total > 0", 30, "the chart")
                while_watched(fleet)
                page.wait_for("document.querySelectorAll('#queue tbody tr[data-key]').length === 4", 30, "the queue")
                page.wait_for("document.querySelectorAll('#events li').length >= 5", 30, "the live events")
                page.type_into("#device-filter", "phone-000")
                page.wait_for("document.querySelectorAll('#devices tbody tr:not([hidden])').length === 5")
                page.js("document.activeElement.blur(); window.scrollTo(0, 0)")
                page.js("new Promise((resolve) => setTimeout(resolve, 600))")  # the charts' next drawing
                page.screenshot(args.path)
                print(f"screenshot: {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
