"""The dashboard's runs panel and a run's grid (PROTOCOL.md, "Runs: many tasks as one"), in real
headless Chromium against a real coordinator process on real Redis: the panel's status and counts
and the grid's cells follow the run's tasks live, a cell shows its task's final screen, a click
opens the task."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Dashboard
from tests.pngs import solid_png
from tests.support import CoordinatorProcess

pytestmark = pytest.mark.e2e

PHONES = ["phone-1", "phone-2", "phone-3"]
WORK = [{"kind": "goal", "goal": "Open Settings"}, {"kind": "goal", "goal": "Pair the watch"}]


def finish(coordinator: CoordinatorProcess, lease: dict[str, Any], status: str, reason: str | None = None) -> None:
    result = {"task_id": lease["task_id"], "attempt": lease["attempt"], "lease_id": lease["lease_id"],
              "status": status, "failure_reason": reason, "metadata": {}}
    answer = coordinator.api.post("/internal/v1/hosts/host-a/results", json=result,
                                  headers=coordinator.host_headers("host-a"))
    assert answer.status_code == 200, answer.text


def final_screen(coordinator: CoordinatorProcess, lease: dict[str, Any]) -> None:
    answer = coordinator.api.put(
        f"/internal/v1/hosts/host-a/leases/{lease['lease_id']}/artifacts/final.png",
        params={"task_id": lease["task_id"], "attempt": lease["attempt"]}, content=solid_png(24, 48, (0, 120, 255)),
        headers={**coordinator.host_headers("host-a"), "content-type": "image/png"})
    assert answer.status_code == 201, answer.text


CELLS = """Object.fromEntries([...document.querySelectorAll('#run-grid a.cell')]
    .map(a => [`${a.dataset.work}|${a.dataset.device}`, a.dataset.status]))"""


def test_the_runs_panel_and_grid_follow_a_matrix_run_live(coordinator: CoordinatorProcess,
                                                          dashboard: Dashboard) -> None:
    coordinator.heartbeat("host-a", PHONES)
    dashboard.open_signed_in()
    page = dashboard.page
    assert page.js("document.querySelector('#runs tbody tr.empty')?.textContent") == "No runs yet."

    run = coordinator.call("POST", "/api/v1/runs", json={"name": "nightly-settings",
                                                         "matrix": {"work": WORK, "devices": {"driver": "sim"}}})
    run_id = run["run_id"]
    dashboard.wait_cell("runs", run_id, "Status", lambda s: s == "running", what="the new run in the panel")
    assert dashboard.cell("runs", run_id, "Name") == "nightly-settings"
    dashboard.wait_cell("runs", run_id, "Tasks", lambda s: s == "3 assigned · 3 queued", what="the run's counts")

    page.js(f"location.hash = '#run/{run_id}'")
    page.wait_for("document.querySelectorAll('#run-grid a.cell').length === 6", what="the grid of 2 x 3")
    assert page.text("#detail-title") == f"Run {run_id}"
    cells = page.js(CELLS)
    assert sorted(cells) == sorted(f"{w['goal']}|{p}" for w in WORK for p in PHONES)
    assert sorted(cells.values()) == ["assigned"] * 3 + ["queued"] * 3

    # Each phone runs its first task: one fails, one leaves a final screen; the cells follow.
    leases = [coordinator.claim("host-a") for _ in PHONES]
    by_device = {lease["device_id"]: lease for lease in leases}
    final_screen(coordinator, by_device["phone-2"])
    finish(coordinator, by_device["phone-1"], "failed", "assertion_failed")
    finish(coordinator, by_device["phone-2"], "succeeded")
    failed = by_device["phone-1"]["task_id"]
    page.wait_for(f"document.querySelector('#run-grid a.cell[data-task=\"{failed}\"]').dataset.status === 'failed'",
                  what="the failed cell, live")
    dashboard.wait_cell("runs", run_id, "Tasks", lambda s: s.startswith("1 succeeded · 1 failed"),
                        what="the panel's counts, live")

    # The rest of the run ends: the run is failed (one task failed), in the view and the panel.
    finish(coordinator, by_device["phone-3"], "succeeded")
    for lease in [coordinator.claim("host-a") for _ in PHONES]:
        finish(coordinator, lease, "succeeded")
    dashboard.wait_cell("runs", run_id, "Status", lambda s: s == "failed", what="the run ended")
    page.wait_for("document.querySelector('#detail-body dd[data-key=status]')?.textContent === 'failed'",
                  what="the view's status")
    assert page.text("#detail-body dd[data-key=counts]") == "5 succeeded · 1 failed"
    # Phone-2's first task left a final screen: its cell shows it.
    shown = by_device["phone-2"]["task_id"]
    page.wait_for(f"document.querySelector('#run-grid a.cell[data-task=\"{shown}\"] img')?.naturalWidth === 24",
                  what="the final screen's thumbnail")

    page.click(f'#run-grid a.cell[data-task="{shown}"]')
    page.wait_for(f"document.getElementById('detail-title').textContent === 'Task {shown}'", what="the task view")
