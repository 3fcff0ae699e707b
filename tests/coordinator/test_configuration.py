"""Small promises of configuration: whole-second intervals, warnings for weak settings, and no
secret in what is logged."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from coordinator.redis_client import describe_url, open_redis
from tests.conftest import ADMIN, make_settings, unique_prefix

pytestmark = pytest.mark.anyio

HOST = "/internal/v1/hosts/host-a"


async def test_heartbeat_interval_is_a_whole_number_of_seconds(api_factory: Any) -> None:
    async with api_factory(heartbeat_interval_s=0.3) as api:
        answer = (await api.heartbeat("host-a", [])).json()
        assert answer["heartbeat_interval_s"] == 1 and answer["draining"] is False


async def test_a_short_admin_token_is_warned_about(api_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        async with api_factory(admin_token="short"):
            pass
    warnings = [r.getMessage() for r in caplog.records if "COORDINATOR_ADMIN_TOKEN" in r.getMessage()]
    assert len(warnings) == 1 and "short" not in warnings[0].replace("shorter", "")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        async with api_factory(admin_token="x" * 32):
            pass
    assert not [r for r in caplog.records if "COORDINATOR_ADMIN_TOKEN" in r.getMessage()]


@pytest.mark.parametrize("url", [
    "redis://:hunter2-secret@127.0.0.1:6379/0",
    "redis://user:hunter2-secret@127.0.0.1:6379/0",
    "redis://127.0.0.1:6379/0?password=hunter2-secret",
    "rediss://127.0.0.1:6379/0?username=u&password=hunter2-secret",
])
async def test_the_redis_url_is_described_without_its_secret(url: str) -> None:
    assert "hunter2" not in describe_url(url)
    client, description = open_redis(make_settings(unique_prefix(), redis_url=url))
    assert "hunter2" not in description and "127.0.0.1" in description
    assert "hunter2" not in repr(make_settings(unique_prefix(), redis_url=url, admin_token=ADMIN))
    await client.aclose()
