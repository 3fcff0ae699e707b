"""The live feed on a real coordinator process: the scripts' events reach watchers, and SIGTERM
ends every open stream at once instead of holding the graceful stop."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest

from coordinator.serve.server import GRACEFUL_TIMEOUT_S
from tests.coordinator.feed_support import ADMIN_HEADERS, open_events
from tests.support import CoordinatorProcess, coordinator_env, fresh_prefix, running

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


async def test_script_events_reach_watchers_and_sigterm_ends_their_streams() -> None:
    with fresh_prefix() as prefix, running(CoordinatorProcess(coordinator_env(prefix))) as coordinator:
        async with httpx.AsyncClient(base_url=coordinator.url, timeout=10) as client:
            sources = [await open_events(client) for _ in range(3)]
            created = await client.post("/api/v1/tasks", headers=ADMIN_HEADERS,
                                        json={"kind": "goal", "goal": "g", "device_id": "feed-1"})
            assert created.status_code == 201, created.text
            task_id = created.json()["task_id"]
            for source in sources:
                _, event = await source.event()
                assert event["type"] == "created" and event["task_id"] == task_id

            stopping = time.monotonic()
            coordinator.process.signal(signal.SIGTERM)
            ends = await asyncio.gather(*(source.frame(timeout=GRACEFUL_TIMEOUT_S) for source in sources))
            assert ends == [None] * 3  # each stream ended, cleanly
            assert coordinator.process.wait(GRACEFUL_TIMEOUT_S + 5) == 0
            # not held for the graceful timeout by the open streams
            assert time.monotonic() - stopping < GRACEFUL_TIMEOUT_S
            for source in sources:
                await source.response.aclose()
