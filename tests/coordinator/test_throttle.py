"""Failed credentials are throttled per client address (coordinator/api/throttle.py): after a burst,
an address's further failures get 429 rate_limited with Retry-After instead of 401, on every
process sharing the Redis; a valid credential is never slowed, from any address. On real Redis,
fakeredis and a real Redis Cluster."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from coordinator.api.throttle import UNKNOWN_ADDRESS, client_address
from coordinator.app import create_app
from coordinator.transport.base import PlainTransport
from tests.conftest import Api, make_settings, unique_prefix
from tests.coordinator.helpers import enrolled_host
from tests.support import ADMIN, HOSTS, wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

ALLOWED = 4
THROTTLE = {"auth_failures_max": ALLOWED, "auth_failures_window_s": 60, "auth_throttle_s": 30}
WRONG = "wrong-credential-0123456789"
THROTTLED_LINE = "throttled: more than"

# One refused credential of each principal: operator, enrollment, host (the path's own host).
FAILURES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/api/v1/tasks", {}),
    ("POST", "/internal/v1/enroll", {"json": {"enrollment_id": "e-1", "host_token": "h" * 40}}),
    ("PUT", "/internal/v1/hosts/host-a/heartbeat", {"json": {"devices": []}}),
]


@contextlib.asynccontextmanager
async def client_at(api: Api, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``api``'s app whose connection comes from ``address``."""
    transport = httpx.ASGITransport(app=api.app, client=(address, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://coordinator") as client:
        yield client


async def fail(client: httpx.AsyncClient, n: int = 0, headers: dict[str, str] | None = None) -> httpx.Response:
    """One refused credential, of the principal ``n`` picks (they take turns)."""
    method, path, kwargs = FAILURES[n % len(FAILURES)]
    return await client.request(method, path, headers={"authorization": f"Bearer {WRONG}{n}", **(headers or {})},
                                **kwargs)


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthorized"
    assert "retry-after" not in response.headers


def assert_throttled(response: httpx.Response, throttle_s: float = THROTTLE["auth_throttle_s"]) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(response.headers["retry-after"]) <= throttle_s


def throttled_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if THROTTLED_LINE in r.getMessage()]


async def test_a_burst_of_failures_of_every_principal_turns_into_429(api_factory: Callable[..., Any]) -> None:
    async with api_factory(**THROTTLE) as api:
        # Operator, enrollment and host credentials count together: one address, one burst.
        for n in range(ALLOWED):
            assert_unauthorized(await fail(api.client, n))
        for n in range(ALLOWED, ALLOWED + 2 * len(FAILURES)):
            assert_throttled(await fail(api.client, n))
        # A request with no credential at all is a failure like any other.
        assert_throttled(await api.client.get("/api/v1/tasks"))


async def test_a_valid_credential_from_a_throttled_address_gets_through(api_factory: Callable[..., Any]) -> None:
    async with api_factory(**THROTTLE) as api:
        for n in range(ALLOWED + 1):
            await fail(api.client, n)
        assert_throttled(await fail(api.client))
        # The same address, every principal with a valid credential: answered as ever.
        assert (await api.admin("GET", "/api/v1/tasks")).status_code == 200
        assert (await api.heartbeat("host-a", ["a1"])).status_code == 200
        host_id, host_headers = await enrolled_host(api)
        response = await api.client.put(f"/internal/v1/hosts/{host_id}/heartbeat", headers=host_headers,
                                        json={"devices": []})
        assert response.status_code == 200
        # A valid host credential on another host's path is refused 403, not throttled.
        response = await api.client.put("/internal/v1/hosts/host-b/heartbeat", json={"devices": []},
                                        headers=Api.host_headers("host-a"))
        assert response.status_code == 403
        # and its failures are still refused 429
        assert_throttled(await fail(api.client, 1))


async def test_valid_credentials_are_never_counted(api_factory: Callable[..., Any]) -> None:
    async with api_factory(**THROTTLE) as api:
        for _ in range(3 * ALLOWED):
            assert (await api.admin("GET", "/api/v1/tasks")).status_code == 200
            assert (await api.heartbeat("host-a", ["a1"])).status_code == 200
        # Only failures count: the address still has its whole allowance.
        for n in range(ALLOWED):
            assert_unauthorized(await fail(api.client, n))
        assert_throttled(await fail(api.client))


async def test_another_address_is_not_throttled(api_factory: Callable[..., Any]) -> None:
    async with api_factory(**THROTTLE) as api, client_at(api, "192.0.2.7") as other, \
            client_at(api, "2001:db8:1:2::7") as v6, client_at(api, "2001:db8:1:3::7") as other_v6:
        for n in range(ALLOWED + 1):
            await fail(api.client, n)
        assert_throttled(await fail(api.client))
        assert_unauthorized(await fail(other))
        # IPv6 counts per /64: another address of the same /64 is the same caller, another /64 is not.
        for n in range(ALLOWED + 1):
            await fail(v6, n)
        async with client_at(api, "2001:db8:1:2::8") as same_64:
            assert_throttled(await fail(same_64))
        assert_unauthorized(await fail(other_v6))


async def test_the_throttle_holds_across_two_processes_on_one_prefix(
        api_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        async with api_factory(**THROTTLE) as a, api_factory(prefix=a.ctx.settings.key_prefix, **THROTTLE) as b:
            # Failures alternate between the processes: only their sum crosses the line.
            for n in range(ALLOWED):
                assert_unauthorized(await fail((a, b)[n % 2].client, n))
            assert_throttled(await fail(b.client))
            assert_throttled(await fail(a.client))
            # Valid credentials still get through on both.
            assert (await a.admin("GET", "/api/v1/tasks")).status_code == 200
            assert (await b.heartbeat("host-a", ["a1"])).status_code == 200
    # The process whose failure began the throttle logged it, and only it.
    assert len(throttled_lines(caplog)) == 1


async def test_one_line_per_throttled_address_per_throttle_and_no_secret(
        api_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        async with api_factory(**{**THROTTLE, "auth_throttle_s": 1}) as api, \
                client_at(api, "198.51.100.9") as other:
            for n in range(ALLOWED + 3):
                await fail(api.client, n)
                await fail(other, n)
            lines = throttled_lines(caplog)
            assert len(lines) == 2
            assert sum("127.0.0.1" in line for line in lines) == 1
            assert sum("198.51.100.9" in line for line in lines) == 1

            # Once the throttle ends, failures are answered 401 and counted afresh; the next
            # burst is a new throttle, and a new line.
            async def unthrottled() -> bool:
                return (await fail(api.client)).status_code == 401

            await wait_until_async(unthrottled, timeout=10, interval=0.05, what="the throttle to end")
            for n in range(1, ALLOWED):
                assert_unauthorized(await fail(api.client, n))
            assert_throttled(await fail(api.client), throttle_s=1)
            assert len(throttled_lines(caplog)) == 3
    text = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert WRONG not in text and ADMIN not in text
    assert not any(token in text for token in HOSTS.values())


async def test_forwarded_for_is_ignored_unless_trusted(api_factory: Callable[..., Any]) -> None:
    async with api_factory(**THROTTLE) as api:
        # Untrusted, the header names nobody: changing it does not escape the peer's count.
        for n in range(ALLOWED + 1):
            await fail(api.client, n, {"x-forwarded-for": f"203.0.113.{n}"})
        assert_throttled(await fail(api.client, 0, {"x-forwarded-for": "203.0.113.200"}))


async def test_forwarded_for_counts_its_rightmost_entry_when_trusted(api_factory: Callable[..., Any]) -> None:
    async with api_factory(**THROTTLE, trust_forwarded_for=True) as api:
        # Behind the proxy every peer is the proxy: the address is the entry the proxy appended,
        # whatever a client wrote to its left.
        for n in range(ALLOWED + 1):
            await fail(api.client, n, {"x-forwarded-for": f"10.9.9.{n}, 203.0.113.5"})
        assert_throttled(await fail(api.client, 0, {"x-forwarded-for": "203.0.113.5"}))
        # Another client behind the same proxy is unaffected.
        assert_unauthorized(await fail(api.client, 0, {"x-forwarded-for": "203.0.113.5, 203.0.113.6"}))
        # No header, or one that names no address: the peer, here not yet throttled.
        assert_unauthorized(await fail(api.client))
        assert_unauthorized(await fail(api.client, 0, {"x-forwarded-for": "unknown"}))


async def test_the_throttle_can_be_turned_off(api_factory: Callable[..., Any]) -> None:
    async with api_factory(**{**THROTTLE, "auth_failures_max": 0}) as api:
        for n in range(3 * ALLOWED):
            assert_unauthorized(await fail(api.client, n))


async def test_without_redis_a_failure_keeps_its_401(caplog: pytest.LogCaptureFixture) -> None:
    # Nothing listens on port 1: the throttle cannot count, and the refusal stands as it was.
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    app = create_app(make_settings(unique_prefix(), **{**THROTTLE, "auth_failures_max": 1}), redis=PlainTransport(dead))
    with caplog.at_level(logging.WARNING, logger="coordinator.outage"):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as client:
            for n in range(3):
                assert_unauthorized(await client.get("/api/v1/tasks", headers={"authorization": f"Bearer {WRONG}{n}"}))
    await dead.aclose()
    # The outage is one line, not one per refused request.
    assert len([r for r in caplog.records if "Redis unreachable" in r.getMessage()]) == 1


def test_the_counted_address() -> None:
    def scope(peer: str | None, *forwarded: bytes) -> dict[str, Any]:
        return {"client": (peer, 1) if peer is not None else None,
                "headers": [(b"x-forwarded-for", value) for value in forwarded]}

    assert client_address(scope("192.0.2.1"), False) == "192.0.2.1"
    assert client_address(scope("::ffff:192.0.2.1"), False) == "192.0.2.1"  # dual-stack socket
    assert client_address(scope("2001:db8:a:b:1:2:3:4"), False) == "2001:db8:a:b::/64"
    assert client_address(scope(None), False) == UNKNOWN_ADDRESS
    # Several header lines are one list: the last line's last entry is the proxy's.
    assert client_address(scope("10.0.0.1", b"198.51.100.1", b"203.0.113.9 , 192.0.2.5"), True) == "192.0.2.5"
    assert client_address(scope("10.0.0.1", b"198.51.100.1"), False) == "10.0.0.1"
    assert client_address(scope("10.0.0.1", b"192.0.2.5, not-an-address"), True) == "10.0.0.1"
