"""Load drivers: calls that must answer as the contract says, and the generators of the measured
load. ``lifecycles`` and ``heartbeats`` (paced: wrk runs closed loops only) run in a spawned
generator process (``loadgen.in_child``), so they are module-level and this module stays light
to import.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import orjson

from bench.loadgen import (
    Connection,
    LoadResult,
    build,
    closed_loop,
    connect,
    connect_many,
    self_cpu_s,
)
from bench.requests import (
    claim_req,
    create_req,
    heartbeat_req,
    renew_body,
    renew_req,
    result_req,
)
from bench.system import CpuWindow

HEARTBEAT_INTERVAL_S = 15
DEVICES_PER_HOST = 10  # the heartbeat scenario's fleet shape (issue: 10,000 hosts x 10 devices)


class BenchError(RuntimeError):
    """A call answered otherwise than the contract says, or a server never settled: the scenario
    stops."""


async def expect(conn: Connection, raw: bytes, *ok: int, timeout: float = 30.0) -> bytes:
    status, body = await conn.request(raw, timeout)
    if status not in ok:
        raise BenchError(f"{raw.split(b' ', 2)[1].decode()} answered {status}: {body[:300]!r}")
    return body


async def fan_out(port: int, raws: list[bytes], concurrency: int = 32) -> list[bytes]:
    """Send every request (over ``concurrency`` connections) and return the bodies, in order;
    any answer other than 200/201 fails the scenario."""
    conns = await connect_many(port, min(concurrency, len(raws)))
    out = [b""] * len(raws)
    todo = iter(range(len(raws)))

    async def worker(conn: Connection) -> None:
        for i in todo:
            out[i] = await expect(conn, raws[i], 200, 201)

    try:
        await asyncio.gather(*(worker(c) for c in conns))
    finally:
        for c in conns:
            c.close()
    return out


async def leased_fleet(port: int, hosts: dict[str, str], admin: str) -> list[dict[str, Any]]:
    """Every host reports one device ("<host>-d0"), gets a task on it and claims it: the
    assignments, in the hosts' order, each under a live lease."""
    await fan_out(port, [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in hosts.items()])
    await fan_out(port, [create_req(admin, f"{h}-d0") for h in hosts])
    claimed = await fan_out(port, [claim_req(h, t, 0) for h, t in hosts.items()])
    return [orjson.loads(body) for body in claimed]


def floor_requests(hosts: dict[str, str], assignments: list[dict[str, Any]]) -> list[bytes]:
    """Requests to the floor with the same headers and body as the hosts' renewals."""
    return [build("POST", "/floor", t, renew_body(a)) for t, a in zip(hosts.values(), assignments, strict=True)]


async def get(port: int, path: str) -> bytes:
    """One GET on a connection of its own; the body of its 200."""
    conn = await connect(port)
    try:
        return await expect(conn, build("GET", path), 200)
    finally:
        conn.close()


async def waiting_polls(port: int) -> float:
    text = (await get(port, "/metrics")).decode()
    for line in text.splitlines():
        if line.startswith("tether_waiting_polls "):
            return float(line.split()[1])
    raise BenchError("/metrics has no tether_waiting_polls")


async def quiet(pid: int, deadline: float, cores: float = 0.05) -> None:
    """Return once the process uses less than ``cores`` CPU over 0.3 s."""
    while time.perf_counter() < deadline:
        window = CpuWindow({"p": pid})
        window.start()
        await asyncio.sleep(0.3)
        if window.stop()["p"] < cores:
            return
    raise BenchError(f"process {pid} did not go quiet")



# -- generator processes (module-level so a spawned process can import them) ------------------


async def lifecycles(ports: tuple[int, int], hosts: list[tuple[str, str]], admin: str, warmup_s: float,
                     duration_s: float, watch: dict[str, int], rate: float) -> LoadResult:
    """Per simulated host: create (operator) -> claim -> renew -> result, each call alternating
    between the two coordinator processes, started at ``rate`` lifecycles/s overall."""
    conns = [[await connect(ports[0]), await connect(ports[1])] for _ in hosts]
    creates = [create_req(admin, f"{h}-d0") for h, _ in hosts]
    claims = [claim_req(h, t, 5) for h, t in hosts]
    slots = itertools.count()
    start = time.perf_counter()

    async def step(i: int, cs: list[Connection]) -> bool:
        host, token = hosts[i]
        delay = start + next(slots) / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        first, second = cs if i % 2 == 0 else cs[::-1]
        if (await first.request(creates[i]))[0] != 201:
            return False
        status, body = await second.request(claims[i], 15)
        if status != 200:
            return False
        assignment = orjson.loads(body)
        if (await first.request(renew_req(host, token, assignment)))[0] != 200:
            return False
        return (await second.request(result_req(host, token, assignment)))[0] == 200

    try:
        return await closed_loop(conns, step, warmup_s, duration_s, watch)
    finally:
        for pair in conns:
            for c in pair:
                c.close()


async def heartbeats(port: int, hosts: list[tuple[str, str]], window_s: float, watch: dict[str, int]) -> LoadResult:
    """First heartbeats of the whole fleet as fast as they go (registration), then one heartbeat
    per host every 15 s, open loop, evenly spread, for ``window_s``. Latency is counted from the
    scheduled send time, so a stalled server shows up as latency, not as a slower schedule."""
    raws = [heartbeat_req(h, t, [f"{h}-d{k}" for k in range(DEVICES_PER_HOST)]) for h, t in hosts]
    conns = await connect_many(port, 64)
    result = LoadResult()
    free: asyncio.Queue[Connection] = asyncio.Queue()
    for c in conns:
        free.put_nowait(c)

    async def send(raw: bytes, scheduled: float, record: bool) -> None:
        conn = await free.get()
        try:
            status, _ = await conn.request(raw)
        finally:
            free.put_nowait(conn)
        if status != 200:
            raise BenchError(f"heartbeat answered {status}")
        if record:
            result.latencies.append(time.perf_counter() - scheduled)

    t0 = time.perf_counter()
    await asyncio.gather(*(send(raw, t0, False) for raw in raws))
    result.extra["registration_per_s"] = len(raws) / (time.perf_counter() - t0)

    rate = len(hosts) / HEARTBEAT_INTERVAL_S
    total = int(rate * window_s)
    window = CpuWindow(watch)
    window.start()
    cpu0 = self_cpu_s()
    start = time.perf_counter()
    sends = []
    for k in range(total):
        scheduled = start + k / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sends.append(asyncio.ensure_future(send(raws[k % len(raws)], scheduled, True)))
    await asyncio.gather(*sends)
    result.seconds = time.perf_counter() - start
    result.cpu = window.stop()
    result.cpu["generator"] = (self_cpu_s() - cpu0) / result.seconds
    result.count = total
    for c in conns:
        c.close()
    return result
