"""One error boundary: every failure is the contract's JSON error, and nothing unexpected is
echoed."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from redis.exceptions import BusyLoadingError, ClusterError, MasterDownError, RedisClusterException, ResponseError

from coordinator.app import create_app
from coordinator.transport.base import PlainTransport
from tests.conftest import Api, make_settings, unique_prefix

pytestmark = pytest.mark.anyio

HOST = "/internal/v1/hosts/host-a"


async def test_unexpected_errors_are_json_500_logged_once_and_never_echoed(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    async def explode(*args: Any) -> Any:
        raise RuntimeError("secret-detail-from-deep-inside")

    api.ctx.queries.get_task = explode
    with caplog.at_level(logging.ERROR, logger="coordinator"):
        response = await api.client.get("/api/v1/tasks/t_1", headers=Api.admin_headers)
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "internal"
    assert "secret-detail" not in response.text
    records = [r for r in caplog.records if r.exc_info]
    assert len(records) == 1
    request_id = error["message"].rsplit(" ", 1)[1].rstrip(")")
    assert request_id in records[0].getMessage()


async def test_redis_unreachable_is_503_unavailable_with_retry_after() -> None:
    # Nothing listens on port 1: every Redis call fails to connect.
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    app = create_app(make_settings(unique_prefix()), redis=PlainTransport(dead))

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as client:
        for method, path, headers, body in [
            ("GET", "/api/v1/tasks", Api.admin_headers, None),
            ("POST", "/api/v1/tasks", Api.admin_headers, {"kind": "goal", "goal": "x", "device_id": "d"}),
            ("PUT", f"{HOST}/heartbeat", Api.host_headers("host-a"), {"devices": []}),
            ("POST", f"{HOST}/claim?wait_s=0", Api.host_headers("host-a"), None),
        ]:
            response = await client.request(method, path, headers=headers, json=body)
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"]["code"] == "unavailable"
            assert int(response.headers["retry-after"]) >= 1
    await dead.aclose()


@pytest.mark.parametrize("failure", [
    ClusterError("TTL exhausted."),
    RedisClusterException("Redis Cluster cannot be connected. Please provide at least one reachable node"),
])
async def test_a_cluster_that_cannot_tell_its_map_is_503_unavailable(api: Api, failure: Exception) -> None:
    """A failover can leave redis-py's cluster client without a slot map for a moment: that is
    Redis being unavailable (retry), not a fault of ours."""
    async def failing_over(*args: Any) -> Any:
        raise failure

    api.ctx.queries.get_task = failing_over
    response = await api.client.get("/api/v1/tasks/t_1", headers=Api.admin_headers)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"


async def test_every_error_status_is_the_json_error_405_with_allow(api: Api) -> None:
    response = await api.client.put("/api/v1/tasks", headers=Api.admin_headers)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    response = await api.client.get(f"{HOST}/heartbeat", headers=Api.host_headers("host-a"))
    assert response.status_code == 405 and response.headers["allow"] == "PUT"


async def test_metrics_method_label_is_a_fixed_set(api: Api) -> None:
    for method in ("FROBNICATE", "X" * 40):
        response = await api.client.request(method, "/healthz")
        assert response.status_code == 405
    metrics = (await api.client.get("/metrics")).text
    assert "FROBNICATE" not in metrics and "X" * 40 not in metrics
    assert 'method="other"' in metrics


@pytest.mark.parametrize("path", ["/api/v1/tasks/", "/healthz/", "/ui/", "/internal/v1/hosts/host-a/heartbeat/"])
async def test_a_trailing_slash_is_404_never_a_redirect_built_from_the_host_header(api: Api, path: str) -> None:
    response = await api.client.get(path, headers={**Api.admin_headers, "host": "evil.example"})
    assert response.status_code == 404 and "location" not in response.headers
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(("failure", "unavailable"), [
    (ResponseError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."), True),
    (ResponseError("Command # 1 (EVALSHA abc 0) of pipeline caused error: BUSY Redis is busy running a script."),
     True),
    (BusyLoadingError("Redis is loading the dataset in memory"), True),
    (MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."), True),
    (ResponseError("BUSYGROUP Consumer Group name already exists"), False),
    (ResponseError("BUSYKEY Target key name already exists."), False),
])
async def test_a_busy_or_loading_redis_is_503_unavailable_and_other_errors_are_500(
        api: Api, failure: Exception, unavailable: bool) -> None:
    async def failing(*args: Any) -> Any:
        raise failure

    api.ctx.queries.get_task = failing
    response = await api.client.get("/api/v1/tasks/t_1", headers=Api.admin_headers)
    assert response.status_code == (503 if unavailable else 500)
    assert response.json()["error"]["code"] == ("unavailable" if unavailable else "internal")
    assert ("retry-after" in response.headers) == unavailable
