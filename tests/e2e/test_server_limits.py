"""The server layer of a real `python -m coordinator serve` process: abusive clients (a request
head over 64 KiB, heads that never complete) and a graceful stop with long-polls waiting."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coordinator.api.routes import ENDPOINTS
from tests.support import (
    ADMIN,
    HOSTS,
    coordinator_env,
    coordinator_process,
    fresh_prefix,
    wait_until,
)

pytestmark = [pytest.mark.e2e]

HEADER_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """The URL of the module's coordinator, which the tests reach over raw sockets."""
    with fresh_prefix() as prefix, coordinator_process(
        coordinator_env(prefix, COORDINATOR_HEADER_TIMEOUT_S=HEADER_TIMEOUT_S)
    ) as process:
        yield process.url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection; raises TimeoutError if it is
    still open after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    received = b""
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        except TimeoutError:
            raise TimeoutError(f"connection still open after {timeout} s") from None
        if not chunk:
            return received
        received += chunk


def _assert_431_or_nothing(response: bytes) -> None:
    if not response:
        return  # a closed connection is the contract's other answer
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"]["code"] == "request_header_too_large"


def _healthz_seconds(url: str) -> float:
    started = time.monotonic()
    assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
    return time.monotonic() - started


def test_request_head_over_64_kib_gets_431_or_a_closed_connection(url: str) -> None:
    with _connect(url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 100 * 1024 + b"\r\n\r\n")
        _assert_431_or_nothing(_read_until_closed(sock, timeout=5))
    # The server is unharmed, and a head just under the limit is still served.
    assert _healthz_seconds(url) < 1
    with _connect(url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Big: "
                     + b"a" * 60 * 1024 + b"\r\n\r\n")
        assert _read_until_closed(sock, timeout=5).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: t\r\n"], ids=["nothing", "partial head"])
def test_connection_without_a_complete_head_is_closed_after_the_header_timeout(
    url: str, sent: bytes,
) -> None:
    with _connect(url) as sock:
        started = time.monotonic()
        sock.sendall(sent)
        assert _read_until_closed(sock, timeout=HEADER_TIMEOUT_S + 5) == b""
        assert time.monotonic() - started >= HEADER_TIMEOUT_S * 0.9


def test_sending_a_head_slowly_does_not_extend_the_header_timeout(url: str) -> None:
    with _connect(url) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        closed = False
        while not closed and time.monotonic() - started < HEADER_TIMEOUT_S + 5:
            try:
                sock.sendall(b"X-Slow: 1\r\n")  # one header line every 50 ms, never the end
                _read_until_closed(sock, timeout=0.05)
                closed = True
            except TimeoutError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                closed = True
        assert closed


def test_client_streaming_a_huge_header_is_cut_off_without_stalling_healthz(url: str) -> None:
    sent = 0
    attack_over = threading.Event()

    def attack() -> None:
        nonlocal sent
        chunk = b"a" * 64 * 1024
        try:
            with _connect(url) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ")
                deadline = time.monotonic() + 10
                while sent < 256 * 1024 * 1024 and time.monotonic() < deadline:
                    sock.sendall(chunk)
                    sent += len(chunk)
        except OSError:
            pass  # the server closed the connection: what this test wants
        finally:
            attack_over.set()

    attacker = threading.Thread(target=attack)
    attacker.start()
    latencies = []
    while not attack_over.is_set() or not latencies:
        latencies.append(_healthz_seconds(url))
    attacker.join()
    # Cut off near the limit (plus what the kernel's socket buffers took), not read to the end.
    assert sent < 32 * 1024 * 1024
    assert max(latencies) < 2.0


def test_sigterm_answers_waiting_polls_at_once_and_exits_0(tmp_path: Path) -> None:
    polls = 3
    statuses: list[int] = []
    answered_at: list[float] = []

    def poll(url: str) -> None:
        response = httpx.post(f"{url}/internal/v1/hosts/host-a/claim?wait_s=30",
                              headers={"authorization": f"Bearer {HOSTS['host-a']}"}, timeout=40)
        answered_at.append(time.monotonic())
        statuses.append(response.status_code)

    with fresh_prefix() as prefix, coordinator_process(coordinator_env(prefix), tmp_path) as coordinator:
        url = coordinator.url
        threads = [threading.Thread(target=poll, args=(url,)) for _ in range(polls)]
        for thread in threads:
            thread.start()
        waiting = f"tether_waiting_polls {polls}.0".encode()
        wait_until(lambda: waiting in coordinator.api.get("/metrics").content, 10, 0.02, what="the polls waiting")
        process = coordinator.process
        assert process is not None
        process.signal(signal.SIGTERM)
        signalled_at = time.monotonic()
        for thread in threads:
            thread.join(10)
        exit_code = process.wait(10)
        exited_after = time.monotonic() - signalled_at
    assert statuses == [204] * polls
    # At once, not after uvicorn's 5 s graceful timeout.
    assert max(answered_at) - signalled_at < 2
    assert exit_code == 0 and exited_after < 4
    log = (tmp_path / "coordinator.log").read_text()
    assert "Exception in ASGI application" not in log and "Traceback" not in log


def test_a_request_still_running_past_the_graceful_timeout_gets_a_json_503(tmp_path: Path) -> None:
    """An upload whose body is still arriving at SIGTERM outlives COORDINATOR_GRACEFUL_TIMEOUT_S:
    it is answered the contract's 503 (JSON, Retry-After, the connection closed), which a client
    retries, not uvicorn's plain-text 500 with a traceback in the log."""
    with fresh_prefix() as prefix, coordinator_process(
        coordinator_env(prefix, COORDINATOR_GRACEFUL_TIMEOUT_S="1"), tmp_path
    ) as coordinator:
        head = (b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{" % ADMIN.encode())
        with _connect(coordinator.url) as sock:
            sock.sendall(head)
            # Served after the head was sent, so the event loop has read the head: the request runs.
            assert _served(coordinator.url)
            process = coordinator.process
            assert process is not None
            process.signal(signal.SIGTERM)
            answer = _read_until_closed(sock, timeout=10)
            exit_code = process.wait(10)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 503 "), answer[:300]
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"retry-after: 1" in headers.lower() and b"connection: close" in headers.lower()
    assert json.loads(body)["error"]["code"] == "unavailable"
    assert exit_code == 0
    log = (tmp_path / "coordinator.log").read_text()
    assert "Exception in ASGI application" not in log and "Traceback" not in log


def _read_answers(sock: socket.socket, methods: list[str], timeout: float) -> list[bytes]:
    """The heads of the answers to requests of ``methods`` sent on a kept-alive connection, in
    order: a HEAD's answer is its head alone, a GET's is followed by Content-Length bytes."""
    deadline = time.monotonic() + timeout
    received = b""

    def more() -> None:
        nonlocal received
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise TimeoutError(f"{len(heads)} of {len(methods)} answers after {timeout} s") from None
        assert chunk, "the server closed the connection"
        received += chunk

    heads: list[bytes] = []
    for method in methods:
        while b"\r\n\r\n" not in received:
            more()
        head, _, received = received.partition(b"\r\n\r\n")
        heads.append(head)
        status = head.split(b" ", 2)[1]
        if method != "HEAD" and status not in (b"204", b"304"):  # those have no body, nor its length
            length = next(int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
                          if line.startswith(b"content-length:"))
            while len(received) < length:
                more()
            received = received[length:]
    return heads


def test_head_is_answered_on_a_kept_alive_connection_and_pipelined_before_a_get(url: str) -> None:
    with _connect(url) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        (head,) = _read_answers(sock, ["HEAD"], timeout=2)
        assert head.startswith(b"HTTP/1.1 200 ")
        # the connection is still usable, and a pipelined HEAD then GET get both their answers
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = _read_answers(sock, ["HEAD", "GET"], timeout=2)
        assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"]


def _get_routes() -> list[str]:
    """Every GET route of the route table (each advertises HEAD), path ids filled in, less the
    live feed: its GET answer is a stream that does not end."""
    paths = [re.sub(r"\{\w+\}", "x1", e.path) for e in ENDPOINTS if e.method == "GET"]
    return [p for p in paths if p != "/api/v1/events"]


@pytest.mark.parametrize("path", _get_routes())
def test_head_answers_as_get_does_on_every_route_that_advertises_it(url: str, path: str) -> None:
    auth = f"Authorization: Bearer {ADMIN}\r\n".encode()
    head_req = b"HEAD %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path.encode(), auth)
    get_req = b"GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path.encode(), auth)
    with _connect(url) as sock:
        sock.sendall(head_req)
        (alone,) = _read_answers(sock, ["HEAD"], timeout=2)
        sock.sendall(head_req + get_req)  # on the same kept-alive connection, pipelined
        head, get = _read_answers(sock, ["HEAD", "GET"], timeout=2)
    status = get.split(b"\r\n", 1)[0]
    assert alone.split(b"\r\n", 1)[0] == head.split(b"\r\n", 1)[0] == status


def test_a_body_in_two_reads_and_one_in_its_head_s_read_are_served_on_one_connection(url: str) -> None:
    """A body the server already holds is read without the body deadline's timer; one still
    arriving is read with it. Both are answered, and neither closes the connection."""
    body = b'{"weight": 2, "max_devices": null}'
    head = (b"PUT /api/v1/teams/split-body HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (ADMIN.encode(), len(body)))
    with _connect(url) as sock:
        sock.sendall(head + body[:5])
        time.sleep(0.2)  # the slow client itself: the server reads the head and a part alone
        sock.sendall(body[5:] + head + body)  # the rest, then a whole request in the same write
        answers = _read_answers(sock, ["PUT", "PUT"], timeout=5)
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert b"connection: close" not in answer.lower()


BODY_TIMEOUT_S = 0.5


def _served(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_a_slow_body_attack_does_not_lock_out_other_clients(tmp_path: Path) -> None:
    """Three times more connections than the process has file descriptors left, each sending a
    valid host's heartbeat head and one byte of its body, then nothing: each is answered 408
    (or closed) after the body timeout, and another client is served meanwhile. (Out of
    descriptors, the server's event loop refuses a connection it cannot accept: another client
    keeps trying, as a host's agent does.)"""
    with fresh_prefix() as prefix, coordinator_process(
        coordinator_env(prefix, COORDINATOR_BODY_TIMEOUT_S=BODY_TIMEOUT_S), tmp_path
    ) as coordinator:
        spare = 20
        limit = len(os.listdir(f"/proc/{coordinator.pid}/fd")) + spare
        resource.prlimit(coordinator.pid, resource.RLIMIT_NOFILE, (limit, limit))
        head = (b"PUT /internal/v1/hosts/host-a/heartbeat HTTP/1.1\r\nHost: t\r\n"
                b"Authorization: Bearer " + HOSTS["host-a"].encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
        attackers = [_connect(coordinator.url) for _ in range(3 * spare)]
        try:
            for sock in attackers:
                sock.sendall(head)
            started = time.monotonic()
            wait_until(lambda: _served(coordinator.url), 10 * BODY_TIMEOUT_S, 0.05, what="/healthz served")
            served_in = time.monotonic() - started
            answers = [_read_until_closed(sock, timeout=30) for sock in attackers]
        finally:
            for sock in attackers:
                sock.close()
        metrics = coordinator.api.get("/metrics").text
    # Before the body timeout, these connections were held for as long as the attacker liked, and
    # the process, out of descriptors, served no other client.
    assert served_in < 10 * BODY_TIMEOUT_S
    log = (tmp_path / "coordinator.log").read_text()
    assert "Traceback" not in log and " ERROR " not in log
    for answer in answers:
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert answer == b"" or b'"code":"request_timeout"' in answer
    assert sum(a.startswith(b"HTTP/1.1 408 ") for a in answers) >= spare
    counted = re.search(rb'tether_http_requests_total\{method="PUT",route="/internal/v1/hosts/\{host_id\}/heartbeat",'
                        rb'status="408"\} (\d+)', metrics.encode())
    assert counted is not None and int(counted.group(1)) >= spare
