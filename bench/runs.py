"""(12) A run of 1,000 tasks created in one request (PROTOCOL.md, "Runs"; issue 40: under a second
on this machine): a matrix of one work item over 1,000 pooled devices (4 static hosts of 250),
each task pinned to its device, so lua/createRun stores, indexes and places (assigns) all 1,000 in
one script. Then the same run's report read back as JUnit (its 1,000 tasks in pages, and their
artifact names). One coordinator process; each sample in a fresh deployment, so every create
finds all the devices free. ``python -m bench --only runs`` measures it alone."""

from __future__ import annotations

import time

import orjson

from bench.context import Bench
from bench.drivers import expect, fan_out
from bench.loadgen import build, connect, percentile
from bench.procs import start_server
from bench.report import Row, fmt_ms
from bench.requests import GOAL, fleet, heartbeat_req

HOSTS = 4
DEVICES_PER_HOST = 250  # below the default COORDINATOR_MAX_DEVICES_PER_HOST (256)
TASKS = HOSTS * DEVICES_PER_HOST
TARGET_S = 1.0


def _matrix_req(admin: str) -> bytes:
    return build("POST", "/api/v1/runs", admin, {
        "name": "bench-matrix", "matrix": {"work": [{"kind": "goal", "goal": GOAL}], "devices": {"driver": "adb"}}})


async def _sample(b: Bench, n: int) -> tuple[float, float]:
    """One create of a 1,000-task matrix and one JUnit report of it, in seconds."""
    hosts = fleet(HOSTS, f"runs-{n}")
    prefix = b.prefix(f"runs-{n}")
    coord = await start_server("coordinator", b.env(prefix), hosts, checkout=b.build)
    try:
        await fan_out(coord.port, [heartbeat_req(h, t, [f"{h}-d{i:03d}" for i in range(DEVICES_PER_HOST)])
                                   for h, t in hosts.items()], HOSTS)
        conn = await connect(coord.port)
        t0 = time.perf_counter()
        run = orjson.loads(await expect(conn, _matrix_req(b.admin), 201))
        t1 = time.perf_counter()
        if run["tasks"] != TASKS or run["counts"]["assigned"] != TASKS:
            raise RuntimeError(f"the matrix made {run['tasks']} tasks, {run['counts']['assigned']} assigned")
        await expect(conn, build("GET", f"/api/v1/runs/{run['run_id']}/report?format=junit", b.admin), 200)
        t2 = time.perf_counter()
        conn.close()
        return t1 - t0, t2 - t1
    finally:
        coord.stop()
        await b.cleanup(prefix)


async def matrix_create(b: Bench) -> list[Row]:
    creates: list[float] = []
    reports: list[float] = []
    for n in range(max(3, b.preset.rounds * 2)):
        create_s, report_s = await _sample(b, n)
        creates.append(create_s)
        reports.append(report_s)
    worst = max(creates)
    return [
        Row("12", f"a run of {TASKS:,} tasks (a matrix over {TASKS:,} devices) created in one request "
                  f"(p50 / max of {len(creates)}, 1 process)",
            f"{fmt_ms(percentile(creates, 50) * 1000)} / {fmt_ms(worst * 1000)}", "", f"< {TARGET_S:g} s",
            "met" if worst < TARGET_S else "MISSED", ""),
        Row("12a", f"its JUnit report read (p50 / max of {len(reports)})",
            f"{fmt_ms(percentile(reports, 50) * 1000)} / {fmt_ms(max(reports) * 1000)}", "", "", "", ""),
    ]
