"""(10) A host with 20 devices renewing its 20 leases: one request per lease against one batch
(``POST /internal/v1/hosts/{host_id}/renewals``), lease renewals per second and the coordinator's
CPU per lease renewal, both measured on the coordinator process in the same run, in turns."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from bench.context import Bench
from bench.drivers import expect, fan_out
from bench.loadgen import Connection, build, connect
from bench.procs import start_server
from bench.report import Row
from bench.requests import claim_req, create_req, fleet, heartbeat_req, renew_body, renew_req
from bench.system import cpu_seconds

DEVICES = 20
CONNECTIONS = 4  # a host's runs renew concurrently, as the agent's do
TARGET_CPU_RATIO = 0.5  # batched: at most half the coordinator CPU per lease of single renewals


def _batch_req(host: str, token: str, assignments: list[dict[str, Any]]) -> bytes:
    return build("POST", f"/internal/v1/hosts/{host}/renewals", token,
                 {"leases": [{**renew_body(a), "lease_id": a["lease_id"]} for a in assignments]})


async def _send_all(conn: Connection, requests: list[bytes]) -> None:
    for raw in requests:  # one at a time on a connection
        await expect(conn, raw, 200)


async def _window(port: int, pid: int, rounds: list[list[bytes]], seconds: float) -> tuple[float, float]:
    """Lease renewals per second, and coordinator CPU (ms) per lease renewal, over ``seconds`` of
    the requests in ``rounds`` (each round: the requests renewing all leases once)."""
    conns = [await connect(port) for _ in range(CONNECTIONS)]
    leases_per_round = DEVICES
    done = 0
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            for requests in rounds:
                await asyncio.gather(*(_send_all(conn, requests[n::CONNECTIONS]) for n, conn in enumerate(conns)))
                done += leases_per_round
    finally:
        for conn in conns:
            conn.close()
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    return done / elapsed, cpu * 1000 / done


async def batch_renewals(b: Bench) -> list[Row]:
    hosts = fleet(1, "renewals")
    (host, token), = hosts.items()
    devices = [f"{host}-d{n}" for n in range(DEVICES)]
    prefix = b.prefix("renewals")
    coord = await start_server("coordinator", b.env(prefix), hosts, checkout=b.build)
    try:
        conn = await connect(coord.port)
        await expect(conn, heartbeat_req(host, token, devices), 200)
        conn.close()
        await fan_out(coord.port, [create_req(b.admin, d) for d in devices])
        assignments = [orjson.loads(a) for a in await fan_out(coord.port, [claim_req(host, token, 0)] * DEVICES)]
        single = [[renew_req(host, token, a) for a in assignments]]
        batched = [[_batch_req(host, token, assignments)]]
        seconds = b.preset.throughput_s
        figures: dict[str, list[tuple[float, float]]] = {"single": [], "batched": []}
        for _ in range(b.preset.rounds):  # in turns: this VM's speed drifts
            figures["single"].append(await _window(coord.port, coord.pid, single, seconds))
            figures["batched"].append(await _window(coord.port, coord.pid, batched, seconds))
    finally:
        coord.stop()
        await b.cleanup(prefix)
    best = {mode: (max(r for r, _ in runs), min(c for _, c in runs)) for mode, runs in figures.items()}
    ratio = best["batched"][1] / best["single"][1]
    return [Row(
        "10", f"one host, {DEVICES} leases: each renewed alone vs all in one batch (POST .../renewals)",
        f"single {best['single'][0]:,.0f} lease renewals/s at {best['single'][1]:.3f} ms coordinator CPU each; "
        f"batched {best['batched'][0]:,.0f}/s at {best['batched'][1]:.3f} ms each",
        f"{ratio:.2f} x the CPU per lease", f"<= {TARGET_CPU_RATIO} x",
        "met" if ratio <= TARGET_CPU_RATIO else "MISSED", "")]
