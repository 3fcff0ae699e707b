"""No secret and no webhook URL in any log line (issue 58 bug 1; PROTOCOL.md, "Webhooks": "Neither
the URL nor the secret is ever logged, by us or by a library"). A real coordinator process, in
both log formats, runs webhooks that deliver, fail with a status and time out, beside operator
and host tokens at work; then every line it wrote is searched for each secret and each URL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import ADMIN, HOSTS, coordinator_env, coordinator_process, fresh_prefix, wait_until
from tests.webhook_receiver import ALLOW_RECEIVERS_ENV, HANG, receiving

pytestmark = pytest.mark.e2e

FAST = {**ALLOW_RECEIVERS_ENV, "COORDINATOR_WEBHOOK_POLL_INTERVAL_S": "0.05",
        "COORDINATOR_WEBHOOK_RETRY_BASE_S": "0.05", "COORDINATOR_WEBHOOK_RETRY_MAX_DELAY_S": "0.2",
        "COORDINATOR_WEBHOOK_ATTEMPT_TIMEOUT_S": "0.3"}


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_log_line_holds_a_secret_or_a_webhook_url(log_format: str) -> None:
    with (receiving() as healthy, receiving(default=500) as failing, receiving(default=HANG) as hanging,
          fresh_prefix() as prefix,
          coordinator_process(coordinator_env(prefix, COORDINATOR_LOG_FORMAT=log_format, **FAST)) as coordinator):
        admin = coordinator.mint("hooks-admin", ["admin"])
        submit = coordinator.mint("ci", ["read", "submit"])
        webhooks = [coordinator.call("POST", "/api/v1/webhooks", token=admin,
                                     json={"url": r.url, "events": ["task.ended"]})
                    for r in (healthy, failing, hanging)]
        coordinator.heartbeat("host-a", ["a1"])
        ran = coordinator.create_task(token=submit, kind="goal", goal="g", device_id="a1")
        assignment = coordinator.claim("host-a")
        reported = httpx.post(f"{coordinator.url}/internal/v1/hosts/host-a/results", timeout=10,
                              headers=coordinator.host_headers("host-a"),
                              json={"task_id": ran["task_id"], "lease_id": assignment["lease_id"],
                                    "attempt": assignment["attempt"], "status": "succeeded"})
        assert reported.status_code == 200, reported.text
        cancelled = coordinator.create_task(token=submit, kind="goal", goal="g", device_id="nowhere")
        coordinator.call("POST", f"/api/v1/tasks/{cancelled['task_id']}/cancel", token=submit)
        wrong = httpx.get(f"{coordinator.url}/api/v1/tasks", headers={"authorization": f"Bearer {ADMIN}x"})
        assert wrong.status_code == 401

        healthy.wait_for(2)
        failing.wait_for(4)  # retried: each failure is a line
        hanging.wait_for(2)  # each timed out: a line each
        wait_until(lambda: all(line in _log(coordinator) for line in ("timeout: no answer", "HTTP 500")),
                   what="the failed attempts' lines")
        log = _log(coordinator)
        signatures = [r.headers["tether-signature"] for r in healthy.requests() + failing.requests()]

    secrets = [ADMIN, *HOSTS.values(), admin, submit, *(w["secret"] for w in webhooks), *signatures]
    urls = [r.url for r in (healthy, failing, hanging)]
    addresses = [r.url.removeprefix("http://").split("/", 1)[0] for r in (healthy, failing, hanging)]
    lines = log.splitlines()
    assert len(lines) > 5
    for line in lines:
        for leak in (*secrets, *urls, *addresses):
            assert leak not in line, f"{leak[:12]}… in {line!r}"


def _log(coordinator: Any) -> str:
    assert coordinator.process is not None
    text: str = coordinator.process.log()
    return text
