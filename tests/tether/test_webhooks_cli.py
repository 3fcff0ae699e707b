"""Webhooks from the command line, against a real coordinator delivering to a real receiver:
``tether webhooks add``, ``tether webhooks``, ``tether webhooks deliveries`` and ``tether webhooks
remove``; the secret printed once, and checked by the receiver with ``tether.verify_signature``."""

from __future__ import annotations

import pytest

from tests.support import CoordinatorProcess, wait_until
from tests.tether.conftest import tether, tether_here
from tests.webhook_receiver import ALLOW_RECEIVERS_ENV, receiving
from tether import verify_signature

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def coordinator_settings() -> dict[str, str]:
    return {**ALLOW_RECEIVERS_ENV, "COORDINATOR_WEBHOOK_POLL_INTERVAL_S": "0.05"}


def test_a_webhook_added_from_the_command_line_hears_of_an_ended_task(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    with receiving() as receiver:
        added = tether(coordinator, "webhooks", "add", receiver.url, "--event", "task.ended")
        assert added.code == 0, added.err
        secret = next(line.split()[-1] for line in added.out.splitlines() if line.startswith("secret"))
        assert secret.startswith("whsec_") and "shown only now" in added.out
        listed = tether_here(coordinator, capsys, "--json", "webhooks").json()["webhooks"]
        [webhook] = [w for w in listed if w["url"] == receiver.url]
        assert webhook["events"] == ["task.ended"] and "secret" not in webhook
        assert secret not in tether_here(coordinator, capsys, "webhooks").out
        try:
            task = coordinator.create_task(device_id="nowhere")
            coordinator.call("POST", f"/api/v1/tasks/{task['task_id']}/cancel")
            [request] = receiver.wait_for(1)
            assert verify_signature(secret, request.headers["tether-signature"], request.body)
            assert request.json()["data"]["task_id"] == task["task_id"]

            def delivered() -> bool:
                shown = tether_here(coordinator, capsys, "--json", "webhooks", "deliveries", webhook["id"]).json()
                return [d["state"] for d in shown["deliveries"]] == ["delivered"]

            wait_until(delivered, what="the delivery shown delivered")
            table = tether_here(coordinator, capsys, "webhooks", "deliveries", webhook["id"])
            assert table.code == 0 and request.delivery in table.out and "delivered" in table.out
        finally:
            removed = tether_here(coordinator, capsys, "webhooks", "remove", webhook["id"])
        assert removed.code == 0 and "removed" in removed.out
        listed = tether_here(coordinator, capsys, "--json", "webhooks").json()["webhooks"]
        assert webhook["id"] not in [w["id"] for w in listed]


@pytest.mark.parametrize("args", [("webhooks", "add", "https://ci.example/hook"),
                                  ("webhooks", "add", "https://ci.example/hook", "--event", "task.started")])
def test_a_webhook_add_without_a_known_event_is_a_usage_error(coordinator: CoordinatorProcess,
                                                              args: tuple[str, ...]) -> None:
    done = tether(coordinator, *args)
    assert done.code == 2 and "Traceback" not in done.err


def test_a_refused_webhook_is_exit_1_with_the_contracts_code(coordinator: CoordinatorProcess) -> None:
    done = tether(coordinator, "webhooks", "add", "ftp://ci.example/hook", "--event", "task.ended")
    assert done.code == 1 and "invalid_request" in done.err
