"""Where a webhook may post (PROTOCOL.md, "Webhooks"): never the coordinator's own machine or its
cloud's metadata (loopback, link-local, unspecified), in whatever form the address is written,
unless COORDINATOR_WEBHOOK_ALLOW_NETWORKS lists it; private ranges stay allowed. Checked at
registration and again at each delivery, and a delivery's ``last_error`` says what went wrong in
a few plain categories that never tell an open port from a closed one."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic import ValidationError

from coordinator.settings import Settings
from tests.coordinator.test_webhooks import FAST, delivery_where, end_task, register
from tests.webhook_receiver import ALLOW_RECEIVERS, receiving

pytestmark = pytest.mark.anyio

NOT_ALLOWED = {k: v for k, v in FAST.items() if k != "webhook_allow_networks"}


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:6379/",
    "http://127.1/hook",
    "http://localhost/hook",
    "http://LOCALHOST:8000/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://2130706433/hook",
    "http://0x7f.1/hook",
    "http://0x7f000001/hook",
    "http://017700000001/hook",
    "http://0/hook",
    "http://0.0.0.0:8000/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/hook",
    "https://ci.example:0/hook",
    "http://10.1.2.3:0/hook",
])
async def test_a_webhook_aimed_at_the_coordinators_own_machine_is_400_and_registers_nothing(
        api_factory: Any, url: str) -> None:
    async with api_factory(**NOT_ALLOWED) as api:
        response = await api.admin("POST", "/api/v1/webhooks", json={"url": url, "events": ["task.ended"]})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_request"
        assert "url" in response.json()["error"]["message"]
        assert (await api.admin("GET", "/api/v1/webhooks")).json() == {"webhooks": []}
        assert await api.ctx.store.redis.exists(api.ctx.store.keys.webhooks) == 0


@pytest.mark.parametrize("url", ["http://10.0.0.5/hook", "https://192.168.1.20:8443/hook", "http://172.16.0.1/hook",
                                 "http://[fd00::1]/hook", "https://ci.example/hook"])
async def test_private_ranges_and_names_that_do_not_resolve_now_are_allowed(api_factory: Any, url: str) -> None:
    # The pattern refuses bracketed IPv6 literals for now: only the others register.
    async with api_factory(**NOT_ALLOWED) as api:
        response = await api.admin("POST", "/api/v1/webhooks", json={"url": url, "events": ["task.ended"]})
        assert response.status_code == (400 if "[" in url else 201), response.text


async def test_the_allow_list_opens_only_the_networks_it_names(api_factory: Any) -> None:
    async with api_factory(**{**NOT_ALLOWED, "webhook_allow_networks": " 127.0.0.0/8 , 10.9.9.9"}) as api:
        for url, status in [("http://127.0.0.1:9000/hook", 201), ("http://localhost:9000/hook", 201),
                            ("http://169.254.169.254/", 400), ("http://0.0.0.0/", 400)]:
            response = await api.admin("POST", "/api/v1/webhooks", json={"url": url, "events": ["task.ended"]})
            assert response.status_code == status, (url, response.text)


@pytest.mark.parametrize("value", ["127.0.0.0/33", "localhost", "127.0.0.0/8,,nope"])
def test_an_allow_list_that_is_not_cidrs_is_refused_at_start_naming_the_entry(value: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(webhook_allow_networks=value)
    assert "is not a CIDR" in str(refused.value)


async def test_a_delivery_whose_host_now_resolves_to_a_refused_address_is_not_made(api_factory: Any) -> None:
    # Registered through the store: as a name that resolved elsewhere when it was registered.
    with receiving() as receiver:
        async with api_factory(**NOT_ALLOWED) as api:
            webhook = await api.ctx.webhooks.create("wh_moved", receiver.url.replace("127.0.0.1", "localhost"),
                                                    ["task.ended"], None, "whsec_test")
            await end_task(api)
            tried = await delivery_where(api, webhook.id, lambda d: d["attempts"] >= 1)
            assert tried["state"] == "pending" and tried["last_status"] is None
            assert tried["last_error"].startswith("refused: ") and "not allowed" in tried["last_error"]
            assert receiver.requests() == []


@asynccontextmanager
async def _not_http() -> AsyncIterator[int]:
    """A loopback port where something that is not HTTP listens (as Redis would): it answers
    an error line and hangs up."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.write(b"-ERR unknown command 'POST'\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_last_error_does_not_tell_an_open_port_from_a_closed_one(api_factory: Any) -> None:
    async with _not_http() as open_port, api_factory(**{**FAST, **ALLOW_RECEIVERS}) as api:
        open_hook = await register(api, f"http://127.0.0.1:{open_port}/hook")
        closed_hook = await register(api, f"http://127.0.0.1:{_closed_port()}/hook")
        await end_task(api)
        seen = [await delivery_where(api, hook["id"], lambda d: d["attempts"] >= 1) for hook in (open_hook, closed_hook)]
        assert seen[0]["last_error"] == seen[1]["last_error"]
        assert seen[0]["last_error"].startswith("refused: ")
        assert seen[0]["last_status"] is None and seen[1]["last_status"] is None


async def test_last_error_names_a_timeout_and_an_http_status_plainly(api_factory: Any) -> None:
    with receiving(default=503) as failing, receiving(default=-1) as hanging:
        async with api_factory(**{**FAST, "webhook_attempt_timeout_s": 0.3}) as api:
            answered = await register(api, failing.url)
            silent = await register(api, hanging.url)
            await end_task(api)
            status = await delivery_where(api, answered["id"], lambda d: d["attempts"] >= 1)
            assert status["last_error"] == "HTTP 503" and status["last_status"] == 503
            timeout = await delivery_where(api, silent["id"], lambda d: d["attempts"] >= 1)
            assert timeout["last_error"] == "timeout: no answer within 0.3 s"
