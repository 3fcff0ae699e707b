"""Idle dispatch: Tether's, the least any HTTP dispatch costs on this machine (its hops alone, and
its hops doing the contract's work), and saq's, probed alike and in turns in the same run (saq's
other figures come with it, for the rows that compare with it).

Idle latency on this VM depends on how long the processes slept: a vCPU left idle for more than
a few hundred microseconds is halted, and waking it costs each hop of the path (seen here: 1.1 ms
for Tether's dispatch with 2 ms between probes, 2.3 ms with 10 ms). So every probe here waits the
same ``PROBE_SPACING_S`` before it starts, the spacing ``bench.peers`` uses for the peers. And the
machine's speed drifts over a run by more than the differences measured, so the three are probed
in turns, a few rounds each, with all their processes up throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import orjson
from redis import Redis as SyncRedis

from bench.context import Bench
from bench.drivers import BenchError, expect
from bench.floor_lifecycle import LifecycleFloor
from bench.loadgen import Connection, build, connect
from bench.peers import (
    PROBE_SPACING_S,
    REDIS_URL,
    Figures,
    Peer,
    make,
    measure_alone,
    session,
)
from bench.procs import server_pair
from bench.requests import claim_req, create_req, result_req

WARMUP = 3  # the first wake-ups of a fresh connection pay one-off costs
ROUNDS = 6  # turns of Tether's, the floor's and saq's probes


async def probe(poll_port: int, create_port: int, poll_raw: bytes, create_raw: bytes, count: int,
                keep_going: Callable[[], bool] = lambda: True,
                settle: Callable[[bytes], bytes] | None = None) -> list[tuple[float, float]]:
    """(send time, latency) of ``create_raw`` sent to one process -> the waiting ``poll_raw`` on
    another answered; ``settle(answer)`` is a request sent after each, on the poll's process, to
    put things back as they were."""
    prober = await Prober.open(poll_port, create_port, poll_raw, create_raw, settle)
    samples: list[tuple[float, float]] = []
    try:
        for n in range(count):
            if not keep_going():
                break
            sample = await prober.once()
            if n >= WARMUP:
                samples.append(sample)
    finally:
        prober.close()
    return samples


@dataclass
class Prober:
    """One dispatch probe at a time on three kept connections: the waiting poll's, the create's,
    and the settling request's (on the poll's process)."""

    poll: Connection
    creator: Connection
    side: Connection
    poll_raw: bytes
    create_raw: bytes
    settle: Callable[[bytes], bytes] | None

    @classmethod
    async def open(cls, poll_port: int, create_port: int, poll_raw: bytes, create_raw: bytes,
                   settle: Callable[[bytes], bytes] | None = None) -> Prober:
        return cls(await connect(poll_port), await connect(create_port), await connect(poll_port),
                   poll_raw, create_raw, settle)

    async def once(self) -> tuple[float, float]:
        """(send time, latency) of one probe."""
        answer = self.poll.request(self.poll_raw, 15)
        await asyncio.sleep(PROBE_SPACING_S)  # the poll parks; every process goes idle
        if answer.done():
            raise BenchError(f"probe poll answered before any work: {answer.result()}")
        t0 = time.perf_counter()
        await expect(self.creator, self.create_raw, 201)
        status, body = await answer
        if status != 200:
            raise BenchError(f"probe poll answered {status}")
        sample = (t0, self.poll.answered_at - t0)
        if self.settle is not None:
            await expect(self.side, self.settle(body), 200)
        return sample

    def close(self) -> None:
        for c in (self.poll, self.creator, self.side):
            c.close()


def _dispatch_reqs(b: Bench, host: str, token: str) -> tuple[bytes, bytes]:
    """The waiting poll of ``host`` and the create of a task for its device."""
    return claim_req(host, token, 10), create_req(b.admin, f"{host}-d0")


async def tether_dispatch(b: Bench, ports: tuple[int, int], host: str, token: str, count: int,
                          keep_going: Callable[[], bool] = lambda: True) -> list[tuple[float, float]]:
    """A task created on process A for the host whose poll waits on process B; each answer is
    reported done, which frees the device for the next."""
    return await probe(ports[1], ports[0], *_dispatch_reqs(b, host, token), count, keep_going,
                       lambda body: result_req(host, token, orjson.loads(body)))


@dataclass
class IdleDispatch:
    """Latencies (s) of rows 4a, 4f, 4g and 4s; saq's is empty when it is not installed."""

    tether: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    floor_work: list[float] = field(default_factory=list)  # 4g
    saq: list[float] = field(default_factory=list)


async def idle_dispatch(b: Bench, ports: tuple[int, int], host: str, token: str, count: int) -> IdleDispatch:
    """Tether's dispatch (``tether_dispatch`` on ``ports``); the dispatch floor's, its hops alone
    (``bench/floor_app.py``: a push on one bare process wakes a BLMPOP on another, which runs one
    script and answers); the same hops doing the contract's work (4g: the lifecycle floor's create
    on one bare process wakes its waiting claim on the other, as Tether's are, each one script of
    bench/floor_lifecycle.py); and saq's (enqueue -> the job function starts in a worker).
    ``count`` probes each, in ``ROUNDS`` turns."""
    per_round = max(count // ROUNDS, WARMUP + 1)
    prefix = b.prefix("dispatch-floor")
    out = IdleDispatch()
    try:
        async with server_pair("floor", b.env(prefix)) as (pusher, popper), _saq_ready() as saq:
            await LifecycleFloor(b.redis, prefix).add_free([f"{host}-d0"])
            for _ in range(ROUNDS):
                out.tether += [lat for _, lat in await tether_dispatch(b, ports, host, token, per_round)]
                floor = await probe(popper.port, pusher.port, build("POST", "/pop"), build("POST", "/push"), per_round)
                out.floor += [lat for _, lat in floor]
                floor = await probe(popper.port, pusher.port, *_dispatch_reqs(b, host, token), per_round,
                                    settle=lambda body: result_req(host, token, orjson.loads(body)))
                out.floor_work += [lat for _, lat in floor]
                if saq is not None:  # as many as the others keep after their warm-up
                    out.saq += await _saq_probes(saq, per_round - WARMUP)
    finally:
        await b.cleanup(prefix)
    return out


@contextlib.asynccontextmanager
async def _saq_ready() -> AsyncIterator[Peer | None]:
    """saq's two workers started and ready, as ``bench.peers`` runs them (None without saq)."""
    if not saq_installed():
        yield None
        return
    tag = f"tb{secrets.token_hex(4)}"
    redis = SyncRedis.from_url(REDIS_URL)
    try:
        with session("saq", peer := make("saq", tag), tag, redis) as start:
            await asyncio.to_thread(start)
            yield peer
    finally:
        redis.close()


async def _saq_probes(peer: Peer, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        samples.append(await asyncio.to_thread(peer.probe) / 1000)
        await asyncio.sleep(PROBE_SPACING_S)
    return samples


def saq_installed() -> bool:
    return importlib.util.find_spec("saq") is not None


async def saq_figures() -> Figures:
    """saq measured as ``python -m bench.peers --only saq`` measures it: its idle dispatch with
    the same spacing as Tether's probe, and its jobs' Redis commands, CPU and bytes."""
    return await asyncio.to_thread(measure_alone, "saq")
