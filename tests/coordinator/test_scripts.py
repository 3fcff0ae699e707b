"""A script call as the transport sees it: the script's function, its keys, its arguments with the
clock's offset last, and its library loaded again when Redis lost it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ResponseError

import coordinator
from coordinator.state.keys import Keys
from coordinator.state.scripts import Deployment, Library, Script
from coordinator.transport.base import NO_WAIT, Durability

pytestmark = pytest.mark.anyio


class _Client:
    def __init__(self) -> None:
        self.loaded: list[str] = []

    async def function_load(self, source: str, replace: bool = False) -> None:
        self.loaded.append(source)


class _Transport:
    """Records each call; answers ``Function not found`` while ``lost`` says so."""

    def __init__(self, lost: int = 0) -> None:
        self.client = _Client()
        self.calls: list[tuple[str, list[Any], list[Any], Durability]] = []
        self.lost = lost

    async def fcall(self, function: str, keys: Sequence[Any], args: Sequence[Any],
                    durability: Durability = NO_WAIT) -> Any:
        self.calls.append((function, list(keys), list(args), durability))
        if self.lost:
            self.lost -= 1
            raise ResponseError("Function not found")
        return [0]


_DEPLOYMENT = Deployment(Keys("k:{t}"), host_offline_after_ms=30_000, inbox_ttl_ms=60_000, claim_timeout_ms=90_000,
                         retention_ms=1_000)


async def test_a_script_call_sends_the_deployment_then_its_arguments_with_the_clock_offset_last() -> None:
    """The one rule for keys (lua/includes/deployment.lua): the deployment's tasks key is the only
    key, and its settings and key base come first in ARGV."""
    library = Library("tether_test", "source")
    script = Script("renewLease", "renewLease_test", library)
    transport = _Transport()
    durable = Durability(replicas=1, timeout_ms=50)
    assert await script(transport, _DEPLOYMENT, [60_000, "lease-1"], durable, 5) == [0]
    assert transport.calls == [("renewLease_test", ["k:{t}:tasks"],
                                [30_000, 60_000, "k:{t}:", 90_000, 1_000, 60_000, "lease-1", 5], durable)]
    assert transport.client.loaded == ["source"]  # loaded before the first call, once


async def test_a_library_redis_lost_is_loaded_again_and_the_call_retried_once() -> None:
    library = Library("tether_test", "source")
    script = Script("renewLease", "renewLease_test", library)
    transport = _Transport(lost=1)
    assert await script(transport, _DEPLOYMENT, []) == [0]
    assert transport.client.loaded == ["source", "source"] and len(transport.calls) == 2
    transport.lost = 2
    with pytest.raises(ResponseError, match="Function not found"):
        await script(transport, _DEPLOYMENT, [])


def test_no_module_of_the_service_sends_lua_of_its_own() -> None:
    """Every script is a file of lua/, a function of the one library, called through ``Script``
    (the Redis clock too: lua/readClock), so each has its header and its rule for keys checked."""
    package = Path(coordinator.__file__).parent
    inline = re.compile(r"\.(?:eval|evalsha|eval_ro|evalsha_ro|register_script|script_load)\(")
    sending = [p.relative_to(package).as_posix() for p in sorted(package.rglob("*.py")) if inline.search(p.read_text())]
    assert sending == []
