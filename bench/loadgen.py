"""A lean HTTP/1.1 keep-alive client over asyncio protocols, and the closed-loop runner.

Why not httpx: on this class of machine httpx spends several times more CPU per request than the
coordinator's own handler, so a benchmark driven by it would mostly measure httpx. This client
sends pre-built request bytes and parses only the status line, Content-Length and the body, so
the generator's CPU per request stays small next to the server's. The floor and the coordinator
figures are always produced by this same client with the same concurrency.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from bench.system import CpuWindow, raise_nofile

DEFAULT_TIMEOUT_S = 30.0


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.closed = False
        # perf_counter() when the last response was complete: uvloop's loop.time() is cached per
        # loop iteration in whole milliseconds, too coarse for latencies.
        self.answered_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError("connection closed by the server"))

    def data_received(self, data: bytes) -> None:
        self._buf += data
        waiter = self._waiter
        if waiter is None:
            return
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self._buf[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        length = 0
        if at >= 0:
            eol = head.find(b"\r\n", at + 2)
            length = int(head[at + 17:eol if eol > 0 else len(head)])
        stop = end + 4 + length
        if len(self._buf) < stop:
            return
        status = int(head[9:12])
        body = bytes(self._buf[end + 4:stop])
        del self._buf[:stop]
        self._waiter = None
        self.answered_at = time.perf_counter()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not waiter.done():
            waiter.set_result((status, body))

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _time_out(self) -> None:
        self._timer = None
        self._fail(TimeoutError("no response in time"))
        self.close()  # a late response would be read as the answer to the next request

    def request(self, raw: bytes, timeout: float = DEFAULT_TIMEOUT_S) -> asyncio.Future[tuple[int, bytes]]:
        """Send ``raw`` (a complete request); the future resolves to (status, body)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        if self.closed or self._transport is None:
            waiter.set_exception(ConnectionError("connection is closed"))
            return waiter
        assert self._waiter is None, "one request at a time per connection"
        self._waiter = waiter
        self._timer = loop.call_later(timeout, self._time_out)
        self._transport.write(raw)
        return waiter

    def close(self) -> None:
        """Close; a request still waiting is cancelled (we hung up, nobody awaits its answer)."""
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if waiter is not None and not waiter.done():
            waiter.cancel()
        if self._transport is not None:
            self._transport.close()


async def connect(port: int, host: str = "127.0.0.1") -> Connection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(Connection, host, port)
    return conn


async def connect_many(port: int, count: int, batch: int = 200) -> list[Connection]:
    """``count`` connections, opened ``batch`` at a time (uvicorn's accept backlog is 2048)."""
    conns: list[Connection] = []
    while len(conns) < count:
        n = min(batch, count - len(conns))
        conns += await asyncio.gather(*(connect(port) for _ in range(n)))
    return conns


def build(method: str, path: str, token: str | None = None, body: Any = None) -> bytes:
    """A complete HTTP/1.1 request; ``body`` is JSON-encoded unless it is already bytes."""
    payload = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if token is not None:
        head += f"Authorization: Bearer {token}\r\n"
    if body is not None:
        head += "Content-Type: application/json\r\n"
    head += f"Content-Length: {len(payload)}\r\n\r\n"
    return head.encode() + payload


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class LoadResult:
    """What one measured window produced. ``cpu`` maps a process label to cores used (1.0 = one
    core busy for the whole window); "generator" is the load generator itself."""

    count: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def p(self, q: float) -> float:
        """Latency percentile in milliseconds."""
        return percentile(self.latencies, q) * 1000


def merge(results: list[LoadResult]) -> LoadResult:
    """Several measured windows as one: counts add up, CPU is the mean over the windows."""
    merged = LoadResult()
    for r in results:
        merged.count += r.count
        merged.errors += r.errors
        merged.seconds += r.seconds
        merged.latencies += r.latencies
    for name in results[0].cpu:
        merged.cpu[name] = sum(r.cpu[name] * r.seconds for r in results) / merged.seconds
    return merged


Step = Callable[[int, list[Connection]], Coroutine[Any, Any, bool]]


async def closed_loop(port_conns: list[list[Connection]], step: Step, warmup_s: float, duration_s: float,
                      watch: dict[str, int]) -> LoadResult:
    """Each worker i runs ``step(i, its connections)`` back to back: warm-up, then a measured
    window of ``duration_s``. ``step`` returns True when the unit of work succeeded. Bounded in
    time: every request has a timeout and no step starts after the window closes."""
    result = LoadResult()
    clock = time.perf_counter  # CLOCK_MONOTONIC: comparable with the orchestrator's stamps
    start = clock()
    measure_from = start + warmup_s
    stop_at = measure_from + duration_s
    window = CpuWindow(watch)
    cpu0 = 0.0

    async def worker(i: int) -> None:
        conns = port_conns[i]
        while True:
            t0 = clock()
            if t0 >= stop_at:
                return
            try:
                ok = await step(i, conns)
            except (ConnectionError, TimeoutError):
                ok = False
                await asyncio.sleep(0.01)
            t1 = clock()
            if measure_from <= t0 and t1 <= stop_at:
                if ok:
                    result.count += 1
                    result.latencies.append(t1 - t0)
                else:
                    result.errors += 1

    async def sampler() -> None:
        nonlocal cpu0
        await asyncio.sleep(warmup_s)
        window.start()
        cpu0 = self_cpu_s()
        result.extra["window_start"] = clock()
        await asyncio.sleep(duration_s)
        result.extra["window_end"] = clock()
        result.cpu = window.stop()
        result.cpu["generator"] = (self_cpu_s() - cpu0) / duration_s

    await asyncio.gather(sampler(), *(worker(i) for i in range(len(port_conns))))
    result.seconds = duration_s
    return result


def run_child(func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
    """Entry point of a spawned load-generator process: run ``func(*args)`` on uvloop."""
    import uvloop

    raise_nofile()
    return uvloop.run(func(*args))


async def in_child(func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
    """Run an async load function in its own process (so its CPU is its own and measured
    apart from the orchestrator's probes) and await its picklable result."""
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return await asyncio.wrap_future(pool.submit(run_child, func, *args))
