"""python -m bench.abuse [--only before|after] [--header-timeout S]

Abusive clients against a real coordinator process on loopback, before and after the server
layer's limits: "before" is plain uvicorn defaults (what `python -m coordinator serve` ran until
coordinator/serve/server.py), "after" is `python -m coordinator serve` as it ships. Prints one table.
Needs Redis (REDIS_URL, default 127.0.0.1:6379); each server uses its own key prefix, deleted after.
Takes about three minutes, most of it the "before" server chewing a 200 MiB header.
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from bench.system import free_port
from coordinator.state.keys import Keys

REPO = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
HUGE_HEADER = 200 * 1024 * 1024
HUGE_CAP_S = 60.0  # the "before" server takes tens of seconds over 200 MiB; stop waiting there
HALF_OPEN = 1000
SERVED_CAP_S = 30.0
CHUNK = b"a" * 256 * 1024


def _serve_default(port: int) -> int:
    """The coordinator as __main__ ran it before coordinator/serve/server.py: plain uvicorn.run."""
    import uvicorn

    from coordinator.app import create_app
    from coordinator.settings import Settings

    uvicorn.run(create_app(Settings()), host="127.0.0.1", port=port, log_level="warning",
                access_log=False, timeout_graceful_shutdown=5)
    return 0


def _healthz(port: int, timeout: float = 2.0) -> float:
    """Seconds one GET /healthz took on a fresh connection; raises on any failure."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"/healthz answered {response.status}")
    finally:
        conn.close()
    return time.monotonic() - started


@contextmanager
def _server(mode: str, header_timeout_s: float, fd_limit: tuple[int, int] | None = None) -> Iterator[int]:
    port = free_port()
    prefix = f"tether-abuse-{uuid.uuid4().hex[:8]}:{{a}}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    env.update(REDIS_URL=REDIS_URL, COORDINATOR_KEY_PREFIX=prefix,
               COORDINATOR_HEADER_TIMEOUT_S=str(header_timeout_s))
    if mode == "after":
        args = [sys.executable, "-m", "coordinator", "serve", "--port", str(port)]
    else:
        args = [sys.executable, "-m", "bench.abuse", "--serve-default", str(port)]

    def limit_fds() -> None:  # `ulimit -Sn` / `ulimit -Hn` in the child
        if fd_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, fd_limit)

    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(args, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=limit_fds)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    _healthz(port)
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        raise RuntimeError(f"{mode} server did not start:\n{log.read().decode()[-2000:]}") from None
                    time.sleep(0.05)
            yield port
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            client = redis.Redis.from_url(REDIS_URL)
            client.delete(*Keys(prefix).fixed())
            client.close()


def _send_header(port: int, size: int, cap_s: float) -> tuple[str, float]:
    """Send a request whose one header is `size` bytes, as fast as the server reads; the outcome
    (status line or "closed") and the seconds until the server answered or closed."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(cap_s)
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\nConnection: close\r\nX-Big: ")
            sent = 0
            while sent < size:
                if time.monotonic() - started > cap_s:
                    return f"still reading after {sent >> 20} MiB", time.monotonic() - started
                sock.sendall(CHUNK[: size - sent])
                sent += min(len(CHUNK), size - sent)
            sock.sendall(b"\r\n\r\n")
            received = sock.recv(4096)
        except TimeoutError:
            return "no answer", time.monotonic() - started
        except OSError:
            received = b""
        elapsed = time.monotonic() - started
    if not received:
        return "closed", elapsed
    return received.split(b"\r\n", 1)[0].decode(errors="replace").removeprefix("HTTP/1.1 "), elapsed


def _probe_while(port: int, attack: Callable[[], None], min_s: float) -> list[float]:
    """/healthz latencies, one request after another, while `attack` runs in a thread (and at
    least `min_s` seconds). A failed probe counts as its time to fail."""
    done = threading.Event()

    def run() -> None:
        try:
            attack()
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started, latencies = time.monotonic(), []
    while not done.is_set() or time.monotonic() - started < min_s:
        t0 = time.monotonic()
        try:
            latencies.append(_healthz(port, timeout=10))
        except OSError:
            latencies.append(time.monotonic() - t0)
    thread.join()
    return latencies


def _latency(values: list[float]) -> str:
    """p50 / p99 / max in ms, and how many probes."""
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values * 99
    p50, p99, top = (v * 1000 for v in (cuts[49], cuts[98], max(values)))
    return f"{p50:.1f} / {p99:.1f} / {top:.0f} ms (n={len(values)})"


def _half_open(port: int, count: int) -> list[socket.socket]:
    """`count` connections that never finish a head: half send nothing, half a partial head."""
    socks = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 2:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n")
        socks.append(sock)
    return socks


def _served_after(port: int, cap_s: float) -> str:
    """Seconds until a new client gets /healthz answered, retrying on any failure."""
    started = time.monotonic()
    while time.monotonic() - started < cap_s:
        try:
            _healthz(port, timeout=max(cap_s - (time.monotonic() - started), 0.1))
            return f"{time.monotonic() - started:.1f} s"
        except OSError:
            time.sleep(0.1)
    return f"not in {cap_s:.0f} s"


def measure(mode: str, header_timeout_s: float) -> dict[str, str]:
    rows: dict[str, str] = {}
    with _server(mode, header_timeout_s) as port:
        outcome, seconds = _send_header(port, 1024 * 1024, HUGE_CAP_S)
        rows["1 MiB header: answer, time"] = f"{outcome}, {seconds * 1000:.0f} ms"
        rows["/healthz idle p50 / p99 / max"] = _latency(_probe_while(port, lambda: None, 3.0))

        huge: list[tuple[str, float]] = []

        def stream_huge() -> None:
            # One connection after another for as long as the probe runs (at least 5 s).
            started = time.monotonic()
            while not huge or time.monotonic() - started < 5.0:
                huge.append(_send_header(port, HUGE_HEADER, HUGE_CAP_S))

        latencies = _probe_while(port, stream_huge, 5.0)
        outcome, seconds = huge[0]
        rows["200 MiB header streamed: answer, time"] = f"{outcome}, {seconds:.2f} s"
        rows["/healthz p50 / p99 / max during huge headers"] = (
            f"{_latency(latencies)}, {len(huge)} attack connections")

        socks = _half_open(port, HALF_OPEN)
        try:
            rows[f"/healthz p50 / p99 / max, {HALF_OPEN:,} half-open held"] = _latency(
                _probe_while(port, lambda: None, 3.0))
        finally:
            for sock in socks:
                sock.close()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    for label, fd_limit in [("ulimit -n 1024", (1024, 1024)), ("soft limit 1024, hard higher", (1024, hard))]:
        with _server(mode, header_timeout_s, fd_limit) as port:
            socks = _half_open(port, HALF_OPEN + 50)  # a few more than 1,024 fds minus the server's own
            try:
                rows[f"new client served, {HALF_OPEN + 50:,} half-open, {label}"] = _served_after(port, SERVED_CAP_S)
            finally:
                for sock in socks:
                    sock.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.abuse")
    parser.add_argument("--only", choices=["before", "after"])
    parser.add_argument("--header-timeout", type=float, default=10.0, help="COORDINATOR_HEADER_TIMEOUT_S")
    parser.add_argument("--serve-default", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_default is not None:
        return _serve_default(args.serve_default)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process holds 1,000+ sockets
    modes = [args.only] if args.only else ["before", "after"]
    results = {}
    for mode in modes:
        print(f"bench.abuse: {mode} ...", file=sys.stderr, flush=True)
        results[mode] = measure(mode, args.header_timeout)
    keys = list(results[modes[0]])
    width = max(len(k) for k in keys)
    col = max(len(v) for r in results.values() for v in r.values())
    print(f"{'':{width}}  " + "  ".join(f"{m:<{col}}" for m in modes))
    for key in keys:
        print(f"{key:{width}}  " + "  ".join(f"{results[m][key]:<{col}}" for m in modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
