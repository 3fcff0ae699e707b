"""(9) Artifacts (issue 30): 100 KB screenshot uploads from 50 leases against the upload floor,
lifecycles with one screenshot each against the same lifecycles without, and the coordinator's
memory while 10 MiB bodies stream in. Load that must saturate comes from wrk; the memory case's
few large uploads from the Python client, while the orchestrator samples the process's RSS."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
from typing import Any

from bench.context import Bench
from bench.drivers import BenchError, fan_out, leased_fleet
from bench.loadgen import LoadResult, connect, merge
from bench.procs import Server, server_pair, start_server
from bench.report import Row, cpu_note, fmt_ms
from bench.requests import GOAL, fleet, heartbeat_req
from bench.system import rss_mb
from bench.wrk import wrk_lifecycles, wrk_uploads

SCREENSHOT = 100 * 1000  # bytes: a step's screenshot (issue 30's "100 KB")
LEASES = 50  # concurrent leases uploading, one wrk connection each
MIB = 1024 * 1024
ROUNDS = 3  # windows per figure, alternated with the figure it is compared with
# Uploads this process streams at once must admit all 50 (the default, 16, answers the rest 503
# for the agent to retry); a task may hold every upload of the run; leases outlive the scenario.
SETTINGS = {"COORDINATOR_MAX_CONCURRENT_UPLOADS": "64", "COORDINATOR_MAX_TASK_ARTIFACTS": "5000",
            "COORDINATOR_MAX_TASK_ARTIFACT_BYTES": str(4096 * MIB), "COORDINATOR_LEASE_TTL_S": "900"}


def _spread(values: list[float], fmt: str = ",.0f") -> str:
    """The median, then every window's figure: this shared VM's speed swings by tens of percent."""
    return f"median {statistics.median(values):{fmt}} ({', '.join(f'{v:{fmt}}' for v in values)})"


def _upload_targets(assignments: list[dict[str, Any]], hosts: dict[str, str]) -> list[tuple[str, str, str]]:
    return [(f"/internal/v1/hosts/{h}/leases/{a['lease_id']}/artifacts/",
             f"?task_id={a['task_id']}&attempt={a['attempt']}&step_index=1", t)
            for (h, t), a in zip(hosts.items(), assignments, strict=True)]


async def _uploads_vs_floor(b: Bench, coord: Server, floor: Server,
                            targets: list[tuple[str, str, str]]) -> tuple[list[LoadResult], list[LoadResult]]:
    """Rows 9a and 9f: wrk's uploads on the coordinator and on the upload floor, in turns."""
    p = b.preset
    tether: list[LoadResult] = []
    floors: list[LoadResult] = []
    floor_targets = [("/blob/", "", token) for _, _, token in targets]
    for _ in range(ROUNDS):
        floors.append(await wrk_uploads(floor.port, floor_targets, SCREENSHOT, p.throughput_s, LEASES,
                                        {"floor": floor.pid, "redis": b.redis_pid}, p.warmup_s))
        tether.append(await wrk_uploads(coord.port, targets, SCREENSHOT, p.throughput_s, LEASES,
                                        {"coordinator": coord.pid, "redis": b.redis_pid}, p.warmup_s))
    return tether, floors


async def _upload_at_once(port: int, targets: list[tuple[str, str, str]], size: int) -> None:
    """One upload of ``size`` fresh random bytes per target, all at once, each on a connection
    of its own; any answer but 201 fails the scenario."""
    conns = [await connect(port) for _ in targets]
    try:
        raws = []
        for path, query, token in targets:
            head = (f"PUT {path}big-{os.urandom(4).hex()}.png{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Authorization: Bearer {token}\r\nContent-Type: image/png\r\nContent-Length: {size}\r\n\r\n")
            raws.append(head.encode() + os.urandom(size))
        answers = await asyncio.gather(*(c.request(raw, 120) for c, raw in zip(conns, raws, strict=True)))
        del raws
        for status, body in answers:
            if status != 201:
                raise BenchError(f"a {size}-byte upload answered {status}: {body[:300]!r}")
    finally:
        for c in conns:
            c.close()


async def _peak_rss(pid: int, upload: asyncio.Future[None]) -> float:
    """The largest VmRSS (MB) seen every 2 ms until ``upload`` is done."""
    peak = rss_mb(pid)
    while not upload.done():
        peak = max(peak, rss_mb(pid))
        await asyncio.sleep(0.002)
    await upload
    return max(peak, rss_mb(pid))


MEMORY_CASES = [("1 MiB", 1, MIB), ("10 MiB", 1, 10 * MIB), ("8 x 10 MiB at once", 8, 10 * MIB)]


async def _memory(server: Server, targets: list[tuple[str, str, str]]) -> tuple[float, dict[str, float]]:
    """Row 9c: a process's RSS idle, and its largest growth over idle during each case (three
    times each: the largest of the three)."""
    idle = rss_mb(server.pid)
    growth: dict[str, float] = {}
    for label, count, size in MEMORY_CASES:
        peaks = []
        for _ in range(3):
            before = rss_mb(server.pid)
            upload = asyncio.ensure_future(_upload_at_once(server.port, targets[:count], size))
            peaks.append(await _peak_rss(server.pid, upload) - before)
        growth[label] = max(peaks)
    return idle, growth


async def _lifecycles_on_off(b: Bench, folder: str) -> tuple[list[LoadResult], list[LoadResult]]:
    """Row 9b: row 3w's wrk lifecycles on two coordinator processes, with one screenshot each
    (on) and without (off), in windows alternating round by round, each window on hosts of its
    own (wrk stops mid-lifecycle)."""
    p = b.preset
    n = p.lifecycle_hosts
    hosts = fleet(2 * ROUNDS * n, "art-life")
    items = list(hosts.items())
    prefix = b.prefix("art-life")
    env = b.env(prefix, COORDINATOR_ARTIFACTS_DIR=folder, **SETTINGS)
    runs: dict[bool, list[LoadResult]] = {True: [], False: []}
    try:
        async with server_pair("coordinator", env, hosts, b.build) as (a, c2):
            await fan_out(a.port, [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in hosts.items()])
            watch = {"coordinator A": a.pid, "coordinator B": c2.pid, "redis": b.redis_pid}
            window_s = p.lifecycle_s / 2
            for r in range(ROUNDS):
                for k, on in enumerate((r % 2 == 0, r % 2 != 0)):
                    share = items[(2 * r + k) * n:(2 * r + k + 1) * n]
                    runs[on].append(await wrk_lifecycles((a.port, c2.port), share, b.admin, GOAL, window_s,
                                                         watch, SCREENSHOT if on else 0))
    finally:
        await b.cleanup(prefix)
    return runs[True], runs[False]


async def artifacts(b: Bench) -> list[Row]:
    folder = tempfile.mkdtemp(prefix="tether-bench-artifacts-")
    prefix, floor_prefix = b.prefix("art"), b.prefix("art-floor")
    hosts = fleet(LEASES, "art")
    try:
        coord = await start_server("coordinator", b.env(prefix, COORDINATOR_ARTIFACTS_DIR=folder, **SETTINGS), hosts,
                                 checkout=b.build)
        floor: Server | None = None
        try:
            targets = _upload_targets(await leased_fleet(coord.port, hosts, b.admin), hosts)
            floor = await start_server("floor", b.env(floor_prefix, COORDINATOR_ARTIFACTS_DIR=folder))
            memory = await _memory(coord, targets)
            held = await _memory(floor, [("/held/", "", token) for _, _, token in targets])
            tether, floors = await _uploads_vs_floor(b, coord, floor, targets)
        finally:
            coord.stop()
            if floor is not None:
                floor.stop()
            await b.cleanup(prefix)
            await b.cleanup(floor_prefix)
        on, off = await _lifecycles_on_off(b, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return [*_upload_rows(tether, floors), _lifecycle_row(b, on, off), *_memory_rows(memory, held)]


def _upload_rows(tether: list[LoadResult], floors: list[LoadResult]) -> list[Row]:
    t, f = merge(tether), merge(floors)
    ratios = [x.rate / y.rate for x, y in zip(tether, floors, strict=True)]

    def result(runs: list[LoadResult]) -> str:
        rates = [r.rate for r in runs]
        server_ms = [sum(c for name, c in r.cpu.items() if name in ("coordinator", "floor")) / r.rate * 1000
                     for r in runs]
        return (f"uploads/s {_spread(rates)}, {statistics.median(rates) * SCREENSHOT / 1e6:,.0f} MB/s; "
                f"server CPU per upload {_spread(server_ms, '.2f')} ms; "
                f"p50 {fmt_ms(statistics.median(r.extra['p50_ms'] for r in runs))}, "
                f"p99 median {fmt_ms(statistics.median(r.extra['p99_ms'] for r in runs))} "
                f"({', '.join(fmt_ms(r.extra['p99_ms']) for r in runs)})")

    return [
        Row("9a", f"upload of a 100 KB screenshot, {LEASES} leases, 1 process, wrk {LEASES} conns", result(tether),
            f"{_spread(ratios, '.2f')} x floor (9f, in turns)", "report", "", cpu_note(t.cpu, t.errors)),
        Row("9f", "upload floor: bare Starlette streams the body to a file, hashing it, renames it to its SHA-256, "
            "runs 1 EVALSHA", result(floors), "1.00", "—", "", cpu_note(f.cpu, f.errors)),
    ]


def _coordinator_ms(load: LoadResult) -> float:
    """Both coordinator processes' CPU (ms) per lifecycle of one window."""
    cores = load.cpu["coordinator A"] + load.cpu["coordinator B"]
    return cores / load.rate * 1000 if load.rate else float("nan")


def _lifecycle_row(b: Bench, on: list[LoadResult], off: list[LoadResult]) -> Row:
    ratios = [x.rate / y.rate for x, y in zip(on, off, strict=True)]
    merged = merge(on)
    return Row("9b", f"lifecycles with one 100 KB screenshot each (create, claim, renew, upload, result), "
               f"2 processes, {b.preset.lifecycle_hosts} hosts, wrk (row 3w's driver)",
               f"on: lifecycles/s {_spread([r.rate for r in on])}; off: {_spread([r.rate for r in off])}; "
               f"coordinators' CPU per lifecycle on {_spread([_coordinator_ms(r) for r in on], '.2f')} ms, "
               f"off {_spread([_coordinator_ms(r) for r in off], '.2f')} ms",
               f"on/off {_spread(ratios, '.2f')} (in turns)", "report", "", cpu_note(merged.cpu, merged.errors))


def _memory_rows(memory: tuple[float, dict[str, float]], held: tuple[float, dict[str, float]]) -> list[Row]:
    """Row 9c, and its control 9h: the same uploads to a bare endpoint that reads each body whole,
    which shows the method sees memory that grows with the bodies."""
    def result(idle: float, growth: dict[str, float]) -> str:
        return f"idle {idle:.0f} MB; " + ", ".join(f"{label} +{mb:.1f} MB" for label, mb in growth.items())

    worst = memory[1][MEMORY_CASES[-1][0]]
    held_worst = held[1][MEMORY_CASES[-1][0]]
    return [
        Row("9c", "coordinator RSS while bodies stream in: peak over idle, each case 3 times (largest shown)",
            result(*memory), f"8 x 10 MiB: {worst / 80:.3f} MB per MiB in flight; {worst / held_worst:.2f} x 9h's",
            "flat: 8 x 10 MiB grows it < one body (10 MiB)", "met" if worst < 10 else "MISSED", ""),
        Row("9h", "control: the same uploads to a bare endpoint that reads each body whole (bench/floor_app.py)",
            result(*held), f"8 x 10 MiB: {held_worst / 80:.3f} MB per MiB in flight", "—", "", ""),
    ]
