"""Idle dispatch: Tether's, the least any HTTP dispatch costs on this machine, and saq's, probed
alike in the same run (saq's other figures come with it, for the rows that compare with it).

Idle latency on this VM depends on how long the processes slept: a vCPU left idle for more than
a few hundred microseconds is halted, and waking it costs each hop of the path (seen here: 1.1 ms
for Tether's dispatch with 2 ms between probes, 2.3 ms with 10 ms). So every probe here waits the
same ``PROBE_SPACING_S`` before it starts, the spacing ``bench.peers`` uses for the peers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Callable

import orjson

from bench.context import Bench
from bench.drivers import BenchError, expect
from bench.loadgen import build, connect
from bench.peers import PROBE_SPACING_S, Figures, measure_alone
from bench.procs import server_pair
from bench.requests import claim_req, create_req, result_req

WARMUP = 3  # the first wake-ups of a fresh connection pay one-off costs


async def probe(poll_port: int, create_port: int, poll_raw: bytes, create_raw: bytes, count: int,
                keep_going: Callable[[], bool] = lambda: True,
                settle: Callable[[bytes], bytes] | None = None) -> list[tuple[float, float]]:
    """(send time, latency) of ``create_raw`` sent to one process -> the waiting ``poll_raw`` on
    another answered; ``settle(answer)`` is a request sent after each, on the poll's process, to
    put things back as they were."""
    poll, creator, side = await connect(poll_port), await connect(create_port), await connect(poll_port)
    samples: list[tuple[float, float]] = []
    warmup = WARMUP
    try:
        for _ in range(count):
            if not keep_going():
                break
            answer = poll.request(poll_raw, 15)
            await asyncio.sleep(PROBE_SPACING_S)  # the poll parks; every process goes idle
            if answer.done():
                raise BenchError(f"probe poll answered before any work: {answer.result()}")
            t0 = time.perf_counter()
            await expect(creator, create_raw, 201)
            status, body = await answer
            if status != 200:
                raise BenchError(f"probe poll answered {status}")
            if warmup > 0:
                warmup -= 1
            else:
                samples.append((t0, poll.answered_at - t0))
            if settle is not None:
                await expect(side, settle(body), 200)
    finally:
        for c in (poll, creator, side):
            c.close()
    return samples


async def tether_dispatch(b: Bench, ports: tuple[int, int], host: str, token: str, count: int,
                          keep_going: Callable[[], bool] = lambda: True) -> list[tuple[float, float]]:
    """A task created on process A for the host whose poll waits on process B; each answer is
    reported done, which frees the device for the next."""
    return await probe(ports[1], ports[0], claim_req(host, token, 10), create_req(b.admin, f"{host}-d0"),
                       count, keep_going, lambda body: result_req(host, token, orjson.loads(body)))


async def floor_dispatch(b: Bench, count: int) -> list[float]:
    """The dispatch floor (``bench/floor_app.py``): a push on one bare process wakes a BLPOP on
    another, which runs one script and answers."""
    try:
        async with server_pair("floor", b.env(b.prefix("dispatch-floor"))) as (pusher, popper):
            samples = await probe(popper.port, pusher.port, build("POST", "/pop"), build("POST", "/push"), count)
    finally:
        await b.cleanup(b.prefix("dispatch-floor"))
    return [lat for _, lat in samples]


def saq_installed() -> bool:
    return importlib.util.find_spec("saq") is not None


async def saq_figures() -> Figures:
    """saq measured as ``python -m bench.peers --only saq`` measures it: its idle dispatch with
    the same spacing as Tether's probe, and its jobs' Redis commands, CPU and bytes."""
    return await asyncio.to_thread(measure_alone, "saq")
