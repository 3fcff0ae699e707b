"""The task view of a failed task, in real headless Chromium against a real coordinator process:
it names the failure's reason and the error text the host reported with it, at the step that
failed (issue 58: it showed only `assertion_failed`)."""

from __future__ import annotations

import json

import pytest

from tests.browser.conftest import Dashboard, running_goal
from tests.support import CoordinatorProcess

pytestmark = pytest.mark.e2e

FACTS = """Object.fromEntries([...document.querySelectorAll('#detail dl.facts:first-of-type dt')]
    .map(dt => [dt.textContent, dt.nextElementSibling.textContent]))"""


def test_a_failed_task_shows_its_reason_and_the_error_text_at_the_step_that_failed(
        coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    task, lease = running_goal(coordinator, "host-a", "phone-1")
    error = "text not on screen: 'Nonexistent app' <b>not markup</b>"
    result = {"task_id": lease["task_id"], "attempt": lease["attempt"], "lease_id": lease["lease_id"],
              "status": "failed", "failure_reason": "assertion_failed",
              "metadata": {"steps": 2, "failed_step": 2, "error": error}}
    reported = coordinator.api.post("/internal/v1/hosts/host-a/results", json=result,
                                    headers=coordinator.host_headers("host-a"))
    assert reported.status_code == 200, reported.text

    dashboard.open_signed_in()
    page = dashboard.page
    page.js(f"location.hash = '#task/{task['task_id']}'")
    page.wait_for(f"({FACTS})['Failure'] === 'assertion_failed'", what="the failure drawn")
    facts = page.js(FACTS)
    assert facts["Error"] == f"step 2: {error}", json.dumps(facts)
