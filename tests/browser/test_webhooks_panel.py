"""The dashboard's webhooks panel (issue 41): for an admin token only, each webhook with its
recent deliveries by state and the last trouble, never a secret. Real headless Chromium against a
real coordinator process delivering to a real HTTP receiver."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Dashboard
from tests.support import CoordinatorProcess, wait_until
from tests.webhook_receiver import ALLOW_RECEIVERS_ENV, receiving

pytestmark = pytest.mark.e2e

FAST = {**ALLOW_RECEIVERS_ENV, "COORDINATOR_WEBHOOK_POLL_INTERVAL_S": "0.05", "COORDINATOR_WEBHOOK_RETRY_BASE_S": "30"}


def ended_task(coordinator: CoordinatorProcess) -> str:
    task_id: str = coordinator.create_task(device_id="nowhere")["task_id"]
    coordinator.call("POST", f"/api/v1/tasks/{task_id}/cancel")
    return task_id


@pytest.mark.parametrize("coordinator_settings", [FAST])
def test_an_admin_sees_each_webhook_s_deliveries_and_a_read_token_sees_no_webhooks(
        coordinator: CoordinatorProcess, dashboard: Dashboard) -> None:
    with receiving(default=200) as healthy, receiving(default=503) as broken:
        good = coordinator.call("POST", "/api/v1/webhooks", json={"url": healthy.url, "events": ["task.ended"]})
        bad = coordinator.call("POST", "/api/v1/webhooks", json={"url": broken.url, "events": ["task.ended"],
                                                                 "team": "checkout"})
        for _ in range(2):
            ended_task(coordinator)
        coordinator.create_task(device_id="nowhere", team="checkout")  # a queued one: nothing delivered
        checkout = coordinator.create_task(device_id="nowhere", team="checkout")["task_id"]
        coordinator.call("POST", f"/api/v1/tasks/{checkout}/cancel")
        healthy.wait_for(3)
        broken.wait_for(1)

        def states(webhook_id: str) -> list[str]:
            listed = coordinator.call("GET", f"/api/v1/webhooks/{webhook_id}/deliveries")["deliveries"]
            return [d["state"] for d in listed if d["attempts"] > 0]
        wait_until(lambda: states(good["id"]) == ["delivered"] * 3, what="three delivered")
        wait_until(lambda: states(bad["id"]) == ["pending"], what="one tried and pending")

        dashboard.open_signed_in()
        page = dashboard.page
        page.wait_for("!document.getElementById('webhooks-section').hidden", what="the webhooks panel")
        assert dashboard.cell("webhooks", good["id"], "Recent deliveries") == "3 delivered"
        assert dashboard.cell("webhooks", good["id"], "Team") == "any"
        assert dashboard.cell("webhooks", bad["id"], "Recent deliveries") == "1 pending"
        assert dashboard.cell("webhooks", bad["id"], "Team") == "checkout"
        trouble = dashboard.cell("webhooks", bad["id"], "Last trouble") or ""
        assert trouble.startswith("HTTP 503 at ") and ", next " in trouble, trouble
        assert "whsec_" not in page.js("document.body.innerHTML")

        page.click("#sign-out")
        dashboard.open_signed_in(coordinator.mint("wall-screen", ["read"]))
        assert page.js("document.getElementById('webhooks-section').hidden") is True
        assert page.js("document.querySelectorAll('#webhooks tr').length") == 0
