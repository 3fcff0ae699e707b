"""(16) Live sessions (issue 54, "Speed and memory"): a command's round trip and what an open
session holds.

Round trip: the operator's ``POST /api/v1/tasks/{id}/commands`` is sent to coordinator process A;
the session's host long-polls ``POST .../leases/{lease}/commands`` on process B, and answers each
command at once in its next poll (``duration_ms`` 0: a host loop of the bench's lean client, so
the driver's own time is none); the clock stops when A's answer is complete. Idle: one session at
a time, each probe ``PROBE_SPACING_S`` after the last, as the dispatch rows are probed: the first
``FRESH`` commands of fresh sessions (16a), then sessions sent ``AGED`` commands first (16e): a
session's history holds its last 200 events, two a command, and what a command's scripts read must
not grow with them (it did, when the history was in the task's record). Loaded (16b): ``LOADED``
aged sessions driven at once, each sending a command every ``PACE_S`` (open loop, each session at
its own phase), every round trip timed. Each in turns with its floor (bench/floor_app.py, the
relay floor: the same four HTTP messages between the same two kinds of process, a script at each
step and both cross-process wake-ups through each process's inbox, and none of Tether's work).

Memory: ``IDLE`` sessions running on one process, each with its host's commands poll parked there
(one connection each); the process's resident memory over what it held before the sessions were
created, per session; and Redis's bytes (``MEMORY USAGE`` of every key of the deployment, summed
by kind) per session beyond what as many running goal tasks on the same devices hold.

``python -m bench --only sessions`` measures it alone.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from bench.context import Bench
from bench.drivers import BenchError, fan_out, quiet, waiting_polls
from bench.loadgen import Connection, build, connect, connect_many, percentile, self_cpu_s
from bench.peers import PROBE_SPACING_S
from bench.procs import glob_escape, server_pair, start_server
from bench.report import Row, cpu_note, fmt_ms
from bench.requests import claim_req, create_req, fleet
from bench.system import CpuWindow, rss_mb

P50_MS, P99_MS = 5.0, 20.0  # issue 54: a command's round trip, idle and with 100 sessions driven
SESSION_KB, REDIS_BYTES = 30.0, 2048  # issue 54: per open idle session
LOADED = 100
PACE_S = 0.5  # a command per loaded session every PACE_S (200 commands/s over 100 sessions)
IDLE = 1000
DEVICES_PER_HOST = 100
HOST_WAIT_S = 20
TAP = {"action": {"action": "tap", "x": 1, "y": 1, "observe": False}}
ROUNDS = 4  # idle probes and loaded windows, each in turns with its floor
WARMUP = 3
FRESH = 20  # a fresh session: the round trips of its first FRESH commands (one session a round)
AGED = 110  # commands every session is sent before the aged rows: its history holds its last 200 events
AGED_PROBES = 50


@dataclass(frozen=True)
class Leased:
    """A running session as its host holds it."""

    host: str
    token: str
    task_id: str
    lease_id: str
    attempt: int


def _heartbeat(host: str, token: str, devices: list[str]) -> bytes:
    return build("PUT", f"/internal/v1/hosts/{host}/heartbeat", token, {
        "devices": [{"device_id": d, "driver": "sim", "status": "available"} for d in devices],
        "agent": {"version": "bench", "hostname": host, "capabilities": {"sessions": True}},
    })


def _devices(host: str) -> list[str]:
    return [f"{host}-d{i}" for i in range(DEVICES_PER_HOST)]


async def open_sessions(port: int, hosts: dict[str, str], admin: str, kind: str = "session") -> list[Leased]:
    """One task of ``kind`` per device of ``hosts`` (``DEVICES_PER_HOST`` each), created and
    claimed through ``port``: the leases."""
    await fan_out(port, [_heartbeat(h, t, _devices(h)) for h, t in hosts.items()])
    body: dict[str, Any] = {"kind": "session", "idle_timeout_s": 3600} if kind == "session" else {}
    creates = [build("POST", "/api/v1/tasks", admin, {**body, "device_id": d}) if body else create_req(admin, d)
               for h in hosts for d in _devices(h)]
    await fan_out(port, creates)
    claimants = [(h, t) for h, t in hosts.items() for _ in range(DEVICES_PER_HOST)]
    leased = []
    for (h, t), raw in zip(claimants, await fan_out(port, [claim_req(h, t, 0) for h, t in claimants]), strict=True):
        a = orjson.loads(raw)
        leased.append(Leased(h, t, a["task_id"], a["lease_id"], a["attempt"]))
    return leased


def _poll_req(s: Leased, answers: list[dict[str, Any]]) -> bytes:
    return build("POST", f"/internal/v1/hosts/{s.host}/leases/{s.lease_id}/commands?wait_s={HOST_WAIT_S}", s.token,
                 {"task_id": s.task_id, "attempt": s.attempt, "answers": answers})


async def _host_loop(conn: Connection, s: Leased) -> None:
    """The session's host: poll, and answer each command at once in the next poll."""
    answers: list[dict[str, Any]] = []
    while True:
        status, body = await conn.request(_poll_req(s, answers), HOST_WAIT_S + 10)
        if status != 200:
            raise BenchError(f"a session's host poll answered {status}: {body[:200]!r}")
        answers = [{"command_id": c["command_id"], "status": "done", "duration_ms": 0}
                   for c in orjson.loads(body)["commands"]]


async def _floor_host_loop(conn: Connection, sid: str) -> None:
    answered = "0"
    while True:
        status, _ = await conn.request(build("POST", f"/relay/{sid}/poll?answered={answered}&wait_s={HOST_WAIT_S}"),
                                       HOST_WAIT_S + 10)
        answered = "1" if status == 200 else "0"


@dataclass
class Relay:
    """One system under test (Tether's or the floor's): its operator requests, hosts running."""

    port_a: int
    sends: list[bytes]  # one operator request per session
    hosts: list[asyncio.Task[None]]


async def _start_hosts(port_b: int, loops: list[Callable[[Connection], Awaitable[None]]]) -> list[asyncio.Task[None]]:
    conns = await connect_many(port_b, len(loops))
    tasks = [asyncio.ensure_future(loop(conn)) for loop, conn in zip(loops, conns, strict=True)]
    await asyncio.sleep(0.5)  # every poll parked
    for t in tasks:
        if t.done():
            t.result()  # raises what stopped it
    return tasks


async def _tether_relay(ports: tuple[int, int], sessions: list[Leased], admin: str) -> Relay:
    hosts = await _start_hosts(ports[1], [partial(_host_loop, s=s) for s in sessions])
    sends = [build("POST", f"/api/v1/tasks/{s.task_id}/commands?wait_s=30", admin, TAP) for s in sessions]
    return Relay(ports[0], sends, hosts)


async def _floor_relay(ports: tuple[int, int], count: int, tag: str) -> Relay:
    sids = [f"{tag}{i}" for i in range(count)]
    hosts = await _start_hosts(ports[1], [partial(_floor_host_loop, sid=sid) for sid in sids])
    return Relay(ports[0], [build("POST", f"/relay/{sid}/send") for sid in sids], hosts)


async def _round_trip(conn: Connection, raw: bytes) -> float:
    t0 = time.perf_counter()
    status, body = await conn.request(raw, 30)
    if status != 200:
        raise BenchError(f"a command answered {status}: {body[:200]!r}")
    return conn.answered_at - t0


async def _idle(relay: Relay, count: int, session: int = 0) -> list[float]:
    conn = await connect(relay.port_a)
    out = []
    try:
        for n in range(count + WARMUP):
            await asyncio.sleep(PROBE_SPACING_S)
            lat = await _round_trip(conn, relay.sends[session])
            if n >= WARMUP:
                out.append(lat)
    finally:
        conn.close()
    return out


@dataclass
class Loaded:
    latencies: list[float]
    commands: int
    seconds: float
    cpu: dict[str, float]


async def _loaded(relay: Relay, window_s: float, watch: dict[str, int]) -> Loaded:
    """Every session sends a command every ``PACE_S``, each at its own phase, for ``window_s``."""
    conns = await connect_many(relay.port_a, len(relay.sends))
    latencies: list[float] = []
    start = time.perf_counter() + PACE_S
    stop_at = start + window_s

    async def operator(conn: Connection, raw: bytes) -> None:
        due = start + random.uniform(0, PACE_S)
        while due < stop_at:
            await asyncio.sleep(max(due - time.perf_counter(), 0))
            latencies.append(await _round_trip(conn, raw))
            due += PACE_S

    window = CpuWindow(watch)
    await asyncio.sleep(max(start - time.perf_counter(), 0))
    window.start()
    cpu0 = self_cpu_s()
    try:
        await asyncio.gather(*(operator(c, raw) for c, raw in zip(conns, relay.sends, strict=True)))
    finally:
        for c in conns:
            c.close()
    seconds = time.perf_counter() - start
    cpu = window.stop()
    cpu["bench (both sides)"] = (self_cpu_s() - cpu0) / seconds
    return Loaded(latencies, len(latencies), seconds, cpu)


async def _age(relay: Relay, commands: int) -> None:
    """``commands`` commands sent to every session, all sessions at once: its history then holds
    the most events it keeps (TASK_EVENTS_KEPT, two a command)."""
    conns = await connect_many(relay.port_a, len(relay.sends))

    async def operator(conn: Connection, raw: bytes) -> None:
        for _ in range(commands):
            await _round_trip(conn, raw)

    try:
        await asyncio.gather(*(operator(c, raw) for c, raw in zip(conns, relay.sends, strict=True)))
    finally:
        for c in conns:
            c.close()


def _stop(relay: Relay) -> None:
    for t in relay.hosts:
        t.cancel()


def _spread(xs: list[float]) -> str:
    return f"p50 {fmt_ms(percentile(xs, 50) * 1000)}, p99 {fmt_ms(percentile(xs, 99) * 1000)} (n={len(xs)})"


def _verdict(xs: list[float], floor: list[float]) -> str:
    p50, p99 = percentile(xs, 50) * 1000, percentile(xs, 99) * 1000
    if p50 <= P50_MS and p99 <= P99_MS:
        return "met"
    if percentile(floor, 50) * 1000 > P50_MS or percentile(floor, 99) * 1000 > P99_MS:
        return "out of reach: the floor is above it"
    return "MISSED"


async def round_trips(b: Bench) -> list[Row]:
    """Rows 16a/16f (idle) and 16b/16g (``LOADED`` sessions driven at once)."""
    hosts = fleet(LOADED // DEVICES_PER_HOST or 1, "sess")
    prefix, floor_prefix = b.prefix("sessions"), b.prefix("sessions-floor")
    idle: dict[str, list[float]] = defaultdict(list)
    aged: dict[str, list[float]] = defaultdict(list)
    loaded: dict[str, list[Loaded]] = defaultdict(list)
    try:
        async with server_pair("coordinator", b.env(prefix), hosts, b.build) as (a, c2), \
                server_pair("floor", b.env(floor_prefix)) as (fa, fb):
            sessions = await open_sessions(a.port, hosts, b.admin)
            systems = {
                "tether": (await _tether_relay((a.port, c2.port), sessions, b.admin),
                           {"coordinator A": a.pid, "coordinator B": c2.pid, "redis": b.redis_pid}),
                "floor": (await _floor_relay((fa.port, fb.port), len(sessions), "s"),
                          {"floor A": fa.pid, "floor B": fb.pid, "redis": b.redis_pid}),
            }
            try:
                # Idle, a fresh session (its first FRESH commands) and an aged one (its record
                # holding the most events it keeps), each in turns with the floor.
                for r in range(ROUNDS):
                    order = list(systems.items()) if r % 2 == 0 else list(systems.items())[::-1]
                    for name, (relay, _) in order:
                        idle[name] += await _idle(relay, FRESH - WARMUP, r)
                await _age(systems["tether"][0], AGED)
                for r in range(ROUNDS):
                    order = list(systems.items()) if r % 2 == 0 else list(systems.items())[::-1]
                    for name, (relay, _) in order:
                        aged[name] += await _idle(relay, AGED_PROBES, ROUNDS + r)
                window_s = b.preset.lifecycle_s / 2
                for r in range(2):
                    order = list(systems.items()) if r % 2 == 0 else list(systems.items())[::-1]
                    for name, (relay, watch) in order:
                        loaded[name].append(await _loaded(relay, window_s, watch))
            finally:
                for relay, _ in systems.values():
                    _stop(relay)
    finally:
        await b.cleanup(prefix)
        await b.cleanup(floor_prefix)

    def merged(runs: list[Loaded]) -> tuple[list[float], float, dict[str, float]]:
        lats = [x for r in runs for x in r.latencies]
        seconds = sum(r.seconds for r in runs)
        cpu = {k: sum(r.cpu[k] * r.seconds for r in runs) / seconds for k in runs[0].cpu}
        return lats, sum(r.commands for r in runs) / seconds, cpu

    t_lat, t_rate, t_cpu = merged(loaded["tether"])
    f_lat, f_rate, f_cpu = merged(loaded["floor"])
    f50 = percentile(idle["floor"], 50)
    target = f"p50 <= {P50_MS:g} ms, p99 <= {P99_MS:g} ms"
    load = f"{LOADED} sessions driven at once, a command each every {PACE_S:g} s"
    fresh = f"the first {FRESH} commands of {ROUNDS} fresh sessions"
    old = f"sessions sent {AGED} commands first (a session's history holds its last 200 events, two a command)"
    return [
        Row("16a", "a session command's round trip, idle: operator POST .../commands on A -> the host's poll on B "
            f"-> its answer (at once) -> A answers; {fresh}; in turns with 16f", _spread(idle["tether"]),
            f"{percentile(idle['tether'], 50) / f50:.2f} x 16f's p50", target,
            _verdict(idle["tether"], idle["floor"]), ""),
        Row("16e", f"the same, idle, {old}; in turns with 16f", _spread(aged["tether"]),
            f"{percentile(aged['tether'], 50) / percentile(aged['floor'], 50):.2f} x 16f's p50 (in turns)", target,
            _verdict(aged["tether"], aged["floor"]), ""),
        Row("16f", "relay floor, idle: the same four HTTP messages and two cross-process inbox wake-ups between two "
            "bare processes, one script a step (bench/floor_app.py)", _spread(idle["floor"] + aged["floor"]), "1.00",
            "—", "", ""),
        Row("16b", f"the same round trip, {load} ({t_rate:,.0f} commands/s), {old}; in turns with 16g",
            _spread(t_lat), f"{percentile(t_lat, 50) / percentile(f_lat, 50):.2f} x 16g's p50", target,
            _verdict(t_lat, f_lat), cpu_note(t_cpu, 0)),
        Row("16g", f"relay floor, {load} ({f_rate:,.0f} commands/s)", _spread(f_lat), "1.00", "—", "",
            cpu_note(f_cpu, 0)),
    ]


def _kind(prefix: str, key: bytes) -> str:
    """A key's kind: its name under the prefix, less the id that ends a per-id key."""
    name = key.decode()[len(prefix) + 1:]
    head = name.split(":", 1)[0]
    return head.split(">", 1)[0] if ":" in name or ">" in name else name


async def _redis_bytes(b: Bench, prefix: str) -> dict[str, int]:
    """``MEMORY USAGE`` of every key of the deployment, summed by kind."""
    by_kind: dict[str, int] = defaultdict(int)
    async for key in b.redis.scan_iter(match=glob_escape(prefix) + ":*", count=1000):
        by_kind[_kind(prefix, key)] += int(await b.redis.memory_usage(key, samples=0) or 0)
    return dict(by_kind)


async def _parked(b: Bench, kind: str) -> tuple[float, float, dict[str, int]]:
    """``IDLE`` tasks of ``kind`` running on one coordinator (a session's host poll parked there):
    its RSS (MB) before they were created and with them, and Redis's bytes by kind."""
    hosts = fleet(IDLE // DEVICES_PER_HOST, f"idle-{kind}")
    prefix = b.prefix(f"sessions-idle-{kind}")
    coord = await start_server("coordinator", b.env(prefix), hosts, checkout=b.build)
    loops: list[asyncio.Task[None]] = []
    try:
        await fan_out(coord.port, [_heartbeat(h, t, _devices(h)) for h, t in hosts.items()])
        deadline = time.perf_counter() + 60
        await quiet(coord.pid, deadline)
        before = rss_mb(coord.pid)
        leased = await open_sessions(coord.port, hosts, b.admin, kind)
        if kind == "session":
            loops = await _start_hosts(coord.port, [partial(_host_loop, s=s) for s in leased])
            while await waiting_polls(coord.port) < IDLE:
                if time.perf_counter() > deadline:
                    raise BenchError("the sessions' polls did not all park in 60 s")
                await asyncio.sleep(0.1)
        await quiet(coord.pid, deadline)
        return before, rss_mb(coord.pid), await _redis_bytes(b, prefix)
    finally:
        for t in loops:
            t.cancel()
        coord.stop()
        await b.cleanup(prefix)


async def idle_sessions(b: Bench) -> list[Row]:
    """Rows 16c and 16d: what ``IDLE`` open idle sessions hold."""
    before, with_sessions, session_bytes = await _parked(b, "session")
    _, _, goal_bytes = await _parked(b, "goal")
    per_session_kb = (with_sessions - before) * 1024 / IDLE
    extra = (sum(session_bytes.values()) - sum(goal_bytes.values())) / IDLE
    by_kind = sorted(((k, (v - goal_bytes.get(k, 0)) / IDLE) for k, v in session_bytes.items()),
                     key=lambda kv: -abs(kv[1]))
    breakdown = ", ".join(f"{k} {v:+,.0f}" for k, v in by_kind if abs(v) >= 1)
    return [
        Row("16c", f"{IDLE:,} open idle sessions on 1 process (each host's commands poll parked there): coordinator "
            "resident memory per session", f"{per_session_kb:.1f} KB/session "
            f"({with_sessions:,.0f} MB, before the sessions {before:,.0f} MB)", "", f"<= {SESSION_KB:g} KB",
            "met" if per_session_kb <= SESSION_KB else "MISSED", ""),
        Row("16d", f"{IDLE:,} open idle sessions: Redis bytes per session beyond as many running goal tasks "
            "(MEMORY USAGE of every key of the deployment)", f"{extra:,.0f} bytes",
            f"by key, bytes per session: {breakdown}", f"<= {REDIS_BYTES:,}",
            "met" if extra <= REDIS_BYTES else "MISSED", ""),
    ]


async def sessions(b: Bench) -> list[Row]:
    return [*await round_trips(b), *await idle_sessions(b)]
