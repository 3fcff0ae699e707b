"""COORDINATOR_LOG_FORMAT: one JSON object a line (ours and uvicorn's), one line per request with
its route template and never a secret; no request lines in text mode."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.serve.logs import REQUESTS_LOGGER, JsonFormatter
from tests.conftest import Api
from tests.support import ADMIN, HOSTS, child_env

pytestmark = pytest.mark.anyio

RFC3339_MS_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
CLAIM_ROUTE = "/internal/v1/hosts/{host_id}/claim"


def _record(message: str, *args: object, exc_info: Any = None, **extra: object) -> logging.LogRecord:
    return logging.getLogger("coordinator").makeRecord(
        "coordinator", logging.WARNING, __file__, 1, message, args, exc_info, extra=extra)


def _json_lines(records: list[logging.LogRecord]) -> list[str]:
    formatter = JsonFormatter()
    return [formatter.format(record) for record in records]


def test_a_record_is_one_json_line_with_its_extras_and_traceback() -> None:
    try:
        raise ValueError("deep\nfailure")
    except ValueError:
        record = _record("lease %s\nexpired", "l_1", exc_info=sys.exc_info(), task_id="t_1", attempt=2)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert RFC3339_MS_UTC.fullmatch(entry["time"])
    assert entry["time"][:19] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    assert entry["level"] == "warning" and entry["logger"] == "coordinator"
    assert entry["message"] == "lease l_1\nexpired"
    assert entry["task_id"] == "t_1" and entry["attempt"] == 2 and entry["pid"] == record.process
    assert entry["traceback"].startswith("Traceback") and "ValueError: deep\nfailure" in entry["traceback"]


def test_an_extra_json_cannot_hold_is_written_as_its_text() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    entry = json.loads(JsonFormatter().format(_record("x", thing=Opaque(), codes={1: "a"})))
    assert entry["thing"] == "opaque!" and entry["codes"] == {"1": "a"}


async def test_one_line_per_request_with_its_route_template_host_id_and_no_secret(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=REQUESTS_LOGGER)
    await api.heartbeat("host-a", ["log-phone"])
    claim = await api.client.post("/internal/v1/hosts/host-a/claim?wait_s=0&probe=query-value-1",
                                  headers={**Api.host_headers("host-a"), "x-request-id": "claim42"})
    assert claim.status_code == 204
    assert (await api.create_task(device_id="log-phone")).status_code in (200, 201)
    listed = await api.client.get("/api/v1/tasks?limit=5&probe=query-value-2", headers=Api.admin_headers)
    assert listed.status_code == 200
    assert (await api.client.get("/no/such/path?probe=query-value-3")).status_code == 404
    unauthorized = await api.client.post("/internal/v1/hosts/host-b/claim",
                                         headers={"authorization": "Bearer wrong-secret-value"})
    assert unauthorized.status_code == 401

    records = [r for r in caplog.records if r.name == REQUESTS_LOGGER]
    lines = [json.loads(line) for line in _json_lines(records)]
    assert [(e["method"], e["route"], e["status"]) for e in lines] == [
        ("PUT", "/internal/v1/hosts/{host_id}/heartbeat", 200),
        ("POST", CLAIM_ROUTE, 204),
        ("POST", "/api/v1/tasks", 201),
        ("GET", "/api/v1/tasks", 200),
        ("GET", "unmatched", 404),
        ("POST", CLAIM_ROUTE, 401),
    ]
    claim_line = lines[1]
    assert claim_line["request_id"] == "claim42" and claim_line["host_id"] == "host-a"
    assert claim_line["message"] == f"POST {CLAIM_ROUTE} 204"
    assert isinstance(claim_line["duration_ms"], float) and claim_line["duration_ms"] >= 0
    assert lines[2]["host_id"] is None and lines[4]["host_id"] is None and lines[5]["host_id"] == "host-b"
    assert all(e["level"] == "info" and e["request_id"] for e in lines)
    text = "\n".join(_json_lines(caplog.records))
    for secret in (ADMIN, *HOSTS.values(), "wrong-secret-value", "query-value", "wait_s", "?"):
        assert secret not in text


async def test_a_path_segment_that_is_no_id_is_not_logged_as_the_host_id(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=REQUESTS_LOGGER)
    await api.client.post("/internal/v1/hosts/not%20an%20id/claim", headers=Api.host_headers("host-a"))
    (record,) = [r for r in caplog.records if r.name == REQUESTS_LOGGER]
    assert record.route == CLAIM_ROUTE and record.host_id is None


async def test_a_failed_request_line_names_the_request_id_of_its_error(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    async def explode(request: Request) -> Response:
        raise RuntimeError("boom")

    api.app.router.routes.append(Route("/explode/{host_id}", explode))
    caplog.set_level(logging.INFO, logger=REQUESTS_LOGGER)
    response = await api.client.get("/explode/host-a")
    assert response.status_code == 500
    request_id = response.json()["error"]["message"].rsplit(" ", 1)[1].rstrip(")")
    (error,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    (line,) = [r for r in caplog.records if r.name == REQUESTS_LOGGER]
    assert error.request_id == line.request_id == request_id
    assert line.status == 500 and line.route == "/explode/{host_id}"
    assert line.host_id == "host-a"


async def test_no_request_lines_while_the_requests_logger_is_off(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.WARNING, logger=REQUESTS_LOGGER)  # as COORDINATOR_LOG_FORMAT=text sets it
    assert (await api.client.get("/healthz")).status_code == 200
    assert (await api.client.get("/no/such/path")).status_code == 404
    assert [r for r in caplog.records if r.name == REQUESTS_LOGGER] == []


# configure_logging changes the whole process's logging: it runs in a child, not under pytest.
_LOG_EVERYTHING = textwrap.dedent("""
    import logging, sys, warnings
    from coordinator.serve.logs import configure_logging
    configure_logging(sys.argv[1])
    logging.getLogger("coordinator").info("ours %s", "here", extra={"task_id": "t_1"})
    logging.getLogger("coordinator.requests").info("GET /healthz 200", extra={"status": 200})
    logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    logging.getLogger("uvicorn.access").info("an access line")
    logging.getLogger("asyncio").error("a library's error")
    warnings.warn("a warning")
    try:
        1 / 0
    except ZeroDivisionError:
        logging.getLogger("coordinator").exception("failed")
""")


def _logged(log_format: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", _LOG_EVERYTHING, log_format], env=child_env(),
                            capture_output=True, timeout=30, check=True)
    assert result.stdout == b""
    return result.stderr.decode().splitlines()


def test_json_format_makes_every_line_ours_and_uvicorns_one_json_object() -> None:
    entries = [json.loads(line) for line in _logged("json")]
    assert [(e["logger"], e["level"], e["message"]) for e in entries] == [
        ("coordinator", "info", "ours here"),
        ("coordinator.requests", "info", "GET /healthz 200"),
        ("uvicorn.error", "warning", "Invalid HTTP request received."),
        ("asyncio", "error", "a library's error"),
        ("py.warnings", "warning", entries[4]["message"]),
        ("coordinator", "error", "failed"),
    ]
    assert "a warning" in entries[4]["message"]
    assert entries[0]["task_id"] == "t_1" and entries[1]["status"] == 200
    assert "ZeroDivisionError" in entries[5]["traceback"]
    assert all(RFC3339_MS_UTC.fullmatch(e["time"]) for e in entries)


def test_text_format_keeps_plain_lines_and_no_request_lines() -> None:
    lines = _logged("text")
    assert any(line.endswith("INFO coordinator: ours here") for line in lines)
    assert any(line.endswith("WARNING uvicorn.error: Invalid HTTP request received.") for line in lines)
    assert not any("GET /healthz" in line or "access line" in line for line in lines)
    assert not any(line.startswith("{") for line in lines)
