"""Hostile and careless clients through the real app (PROTOCOL.md, Conventions; issue 39): a
client that hangs up mid-body is no server error, no body is read before the credential, and a
body that does not arrive in time is cut off. Requests are driven through the ASGI interface
itself, so that a body can stop half-way and a client can go away."""

from __future__ import annotations

import asyncio
import logging
import re
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.api.boundary import REQUESTS_LOGGER
from coordinator.api.routes import ENDPOINTS, Endpoint
from coordinator.api.validation import LARGE_JSON_BYTES, load_object
from coordinator.errors import InvalidRequest
from tests.conftest import Api
from tests.coordinator.helpers import enrolled_host, running_task

pytestmark = pytest.mark.anyio

Receive = Callable[[], Awaitable[dict[str, Any]]]
FIRST_CHUNK = b'{"devices": ['  # the start of a body, never its end
DECLARED = b"4096"
# How long an answer that reads no body may take; the app answers in milliseconds.
AT_ONCE_S = 5.0

# Every route that takes a body (the contract's "order of checks" is about these).
BODY_ROUTES = [e for e in ENDPOINTS if e.request is not None]
JSON_ROUTES = [e for e in BODY_ROUTES if e.request != "ArtifactBody"]


def _name(endpoint: Endpoint) -> str:
    return f"{endpoint.method} {endpoint.path}"


def hangs_up() -> Receive:
    """A client that sends the start of its body and goes away."""
    messages = iter([{"type": "http.request", "body": FIRST_CHUNK, "more_body": True}])

    async def receive() -> dict[str, Any]:
        return next(messages, {"type": "http.disconnect"})

    return receive


def never_finishes() -> Receive:
    """A client that sends the start of its body and then nothing, for ever."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": FIRST_CHUNK, "more_body": True}
        await asyncio.Event().wait()  # no more bytes come; only a timeout ends this
        raise AssertionError("unreachable")

    return receive


async def call(api: Api, method: str, path: str, headers: dict[str, str], receive: Receive,
               timeout_s: float = AT_ONCE_S) -> list[dict[str, Any]]:
    """The ASGI messages the app sent for this request; fails if it takes over ``timeout_s``."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path, _, query = path.partition("?")
    headers = {"content-type": "application/json", **headers, "content-length": DECLARED.decode()}
    head = [(name.encode(), value.encode()) for name, value in headers.items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "headers": head,
             "client": ("127.0.0.1", 1), "server": ("coordinator", 80), "root_path": ""}
    await asyncio.wait_for(api.app(scope, receive, send), timeout_s)
    return sent


def header(start: dict[str, Any], name: bytes) -> bytes | None:
    return next((value for key, value in start["headers"] if key.lower() == name), None)


async def path_and_credential(api: Api, endpoint: Endpoint) -> tuple[str, dict[str, str]]:
    """The route's path with ids filled in, and a valid credential for it (the artifact upload:
    a running task's lease, and an image's Content-Type)."""
    if endpoint.request == "ArtifactBody":
        leased = await running_task(api)
        path = (f"/internal/v1/hosts/host-a/leases/{leased['lease_id']}/artifacts/shot.png"
                f"?task_id={leased['task_id']}&attempt={leased['attempt']}")
        return path, {**Api.host_headers("host-a"), "content-type": "image/png"}
    if endpoint.security == "enrollment":
        token = (await api.admin("POST", "/api/v1/enrollment-tokens", json={})).json()["token"]
        headers = {"authorization": f"Bearer {token}"}
        host_id = "x1"
    elif endpoint.security == "host":
        host_id, headers = await enrolled_host(api)
    else:
        headers, host_id = dict(Api.admin_headers), "x1"
    path = endpoint.path.replace("{host_id}", host_id)
    return re.sub(r"\{\w+\}", "x1", path), headers


async def requests_counted(api: Api, endpoint: Endpoint, status: int) -> str:
    metrics = (await api.client.get("/metrics")).text
    line = f'tether_http_requests_total{{method="{endpoint.method}",route="{endpoint.path}",status="{status}"}}'
    return next((row.removeprefix(line).strip() for row in metrics.splitlines() if row.startswith(line)), "")


# -- a hang-up is not a server error -------------------------------------------------------


@pytest.mark.parametrize("endpoint", JSON_ROUTES, ids=_name)
async def test_a_client_hanging_up_mid_body_is_no_server_error(
        api: Api, endpoint: Endpoint, caplog: pytest.LogCaptureFixture) -> None:
    path, headers = await path_and_credential(api, endpoint)
    with caplog.at_level(logging.DEBUG, logger="coordinator"):
        sent = await call(api, endpoint.method, path, headers, hangs_up())
    assert sent == []  # nobody is there to read an answer
    # The access log (when on) has its line for every request, this one's included (status 499).
    ours = [r for r in caplog.records if r.name.startswith("coordinator") and r.name != REQUESTS_LOGGER]
    assert [r.levelno for r in ours] in ([], [logging.DEBUG]), [r.getMessage() for r in ours]
    assert not any(r.exc_info for r in caplog.records)
    assert await requests_counted(api, endpoint, 499) == "1.0"
    assert await requests_counted(api, endpoint, 500) == ""


# -- no body before the credential ---------------------------------------------------------

BAD_CREDENTIALS = {"operator": "tok_never-minted-0123456789", "host": "never-a-host-token-0123456789",
                   "enrollment": "tet_never-minted-0123456789"}


@pytest.mark.parametrize("endpoint", BODY_ROUTES, ids=_name)
async def test_a_bad_credential_is_401_at_once_with_a_body_that_never_finishes(api: Api, endpoint: Endpoint) -> None:
    assert endpoint.security is not None
    path, headers = await path_and_credential(api, endpoint)
    bad = {**headers, "authorization": f"Bearer {BAD_CREDENTIALS[endpoint.security]}"}
    sent = await call(api, endpoint.method, path, bad, never_finishes())  # fails if it waits for the body
    start = sent[0]
    assert start["status"] == 401
    assert header(start, b"connection") == b"close"  # the rest of the body is not waited for either


# -- a body has COORDINATOR_BODY_TIMEOUT_S to arrive -----------------------------------------

BODY_TIMEOUT_S = 0.3


@pytest.mark.parametrize("endpoint", BODY_ROUTES, ids=_name)
async def test_a_body_not_complete_in_time_is_408_request_timeout_and_closes(
        api_factory: Callable[..., Any], endpoint: Endpoint) -> None:
    async with api_factory(body_timeout_s=BODY_TIMEOUT_S) as api:
        path, headers = await path_and_credential(api, endpoint)
        sent = await call(api, endpoint.method, path, headers, never_finishes(), timeout_s=BODY_TIMEOUT_S + AT_ONCE_S)
        start = sent[0]
        assert start["status"] == 408 and header(start, b"connection") == b"close"
        assert b'"code":"request_timeout"' in sent[1]["body"]
        assert await requests_counted(api, endpoint, 408) == "1.0"


async def test_a_body_in_time_keeps_its_connection(api: Api) -> None:
    sent: list[dict[str, Any]] = []
    body = b'{"kind": "goal", "goal": "x", "device_id": "d-1"}'
    messages = iter([{"type": "http.request", "body": body[:10], "more_body": True},
                     {"type": "http.request", "body": body[10:], "more_body": False}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    head = [(b"authorization", Api.admin_headers["authorization"].encode()),
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/api/v1/tasks", "raw_path": b"/api/v1/tasks", "query_string": b"", "headers": head,
             "client": ("127.0.0.1", 1), "server": ("coordinator", 80), "root_path": ""}
    await api.app(scope, receive, send)
    assert sent[0]["status"] == 201 and header(sent[0], b"connection") is None


# -- large renewals: bounded memory --------------------------------------------------------

MIB = 1024 * 1024


async def test_sixteen_large_renewals_at_once_hold_a_bounded_memory(api: Api) -> None:
    """Each 8 MiB renewal was parsed by orjson in some 104 MiB, all 16 at once: now one at a time
    (COORDINATOR_MAX_CONCURRENT_LARGE_BODIES), by the standard library, in about 16 MiB."""
    leased = await running_task(api)
    chunk = b"a" * (64 * 1024)  # one object, sent 127 times (just under 8 MiB): the client holds 64 KiB
    head = (b'{"task_id": "%s", "attempt": %d, "progress": {"step_index": 0, "status": "running", "summary": "'
            % (leased["task_id"].encode(), leased["attempt"]))
    size = len(head) + 127 * len(chunk) + 3

    async def body() -> AsyncIterator[bytes]:
        yield head
        for _ in range(127):
            yield chunk
        yield b'"}}'

    async def renew() -> int:
        response = await api.client.post(
            f"/internal/v1/hosts/host-a/leases/{leased['lease_id']}/renew", content=body(),
            headers={**Api.host_headers("host-a"), "content-type": "application/json", "content-length": str(size)})
        return response.status_code

    tracemalloc.start()
    try:
        statuses = await asyncio.gather(*(renew() for _ in range(16)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert statuses == [200] * 16
    assert peak < 40 * MIB, f"{peak / MIB:.0f} MiB at the peak"


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)  # no lone surrogate: not JSON's
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=20,
)
_PAD = "x" * (LARGE_JSON_BYTES + 1)  # past it, a body is parsed by the standard library


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_a_large_body_is_read_as_orjson_reads_it(value: Any) -> None:
    raw = orjson.dumps({"pad": _PAD, "value": value})
    assert load_object(raw) == orjson.loads(raw)


@pytest.mark.parametrize("text", [b"NaN", b"-Infinity", b'"\\ud800"', b'"\xff"', b"[" * 100_000, b"1e400x", b"{}{}"])
def test_a_large_body_refuses_what_orjson_refuses(text: bytes) -> None:
    raw = b'{"pad": "' + _PAD.encode() + b'", "value": ' + text + b"}"
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)  # the reference refuses it ...
    with pytest.raises(InvalidRequest):
        load_object(raw)  # ... and so does the large body's reading
