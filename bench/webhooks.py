"""(13) Webhooks (issue 41): lifecycles (create, claim, renew, result) on two coordinator processes
while a webhook for ``task.ended`` points at an endpoint that accepts each connection and never
answers, against the same lifecycles with no webhook at all, in windows alternating round by
round. Every ended task then costs its script an XADD to the outbox, and each process holds its
attempts to that endpoint open until their timeout (10 s) while it defers the rest: none of it
may slow the API. The webhook is removed after each of its windows, which drops its backlog."""

from __future__ import annotations

import asyncio
import statistics

import orjson

from bench.context import Bench
from bench.drivers import expect, fan_out, lifecycles
from bench.loadgen import LoadResult, build, connect, merge
from bench.procs import server_pair
from bench.report import Row, cpu_note
from bench.requests import fleet, heartbeat_req

ROUNDS = 3  # windows per figure, alternated with the figure it is compared with
TARGET_RATIO = 0.95  # issue 41: within 5% of the rate with no webhook
UNTHROTTLED = 1e9  # lifecycles/s: start each as soon as the last one of its host ended


async def _hanging_endpoint() -> tuple[asyncio.Server, str]:
    """A receiver that reads each request and answers nothing, until the sender gives up."""
    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # until the sender's attempt times out and it closes
        finally:
            writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/hook"


async def _admin_call(port: int, raw: bytes, status: int) -> bytes:
    """One operator call on a connection of its own (a kept one would be closed while idle)."""
    conn = await connect(port)
    try:
        return await expect(conn, raw, status)
    finally:
        conn.close()


async def hanging_endpoint(b: Bench) -> list[Row]:
    p = b.preset
    hosts = fleet(p.lifecycle_hosts, "webhooks")
    items = list(hosts.items())
    prefix = b.prefix("webhooks")
    endpoint, url = await _hanging_endpoint()
    runs: dict[bool, list[LoadResult]] = {True: [], False: []}
    try:
        async with server_pair("coordinator", b.env(prefix), hosts, b.build) as (a, c2):
            await fan_out(a.port, [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in hosts.items()])
            watch = {"coordinator A": a.pid, "coordinator B": c2.pid, "redis": b.redis_pid}
            window_s = p.lifecycle_s / 2
            for r in range(ROUNDS):
                for on in (r % 2 == 0, r % 2 != 0):
                    webhook_id = None
                    if on:
                        created = await _admin_call(a.port, build("POST", "/api/v1/webhooks", b.admin,
                                                                  {"url": url, "events": ["task.ended"]}), 201)
                        webhook_id = orjson.loads(created)["id"]
                    runs[on].append(await lifecycles((a.port, c2.port), items, b.admin, p.warmup_s, window_s,
                                                     watch, UNTHROTTLED))
                    if webhook_id is not None:
                        await _admin_call(a.port, build("DELETE", f"/api/v1/webhooks/{webhook_id}", b.admin), 200)
    finally:
        endpoint.close()
        await b.cleanup(prefix)
    ratios = [x.rate / y.rate for x, y in zip(runs[True], runs[False], strict=True)]
    # Judged on the medians: one window's rate moves by 10% on a shared machine, either way.
    ratio = statistics.median(r.rate for r in runs[True]) / statistics.median(r.rate for r in runs[False])
    merged = merge(runs[True])

    def spread(results: list[LoadResult]) -> str:
        rates = sorted(r.rate for r in results)
        return f"{statistics.median(rates):,.0f} ({', '.join(f'{x:,.0f}' for x in rates)})"

    return [Row(
        "13", f"lifecycles/s while a webhook endpoint hangs vs no webhook (create, claim, renew, result; "
              f"2 processes, {p.lifecycle_hosts} hosts, in turns)",
        f"hanging webhook: {spread(runs[True])}; none: {spread(runs[False])}; "
        f"{sum(r.count for r in runs[True]):,} lifecycles with the webhook",
        f"median on/off {ratio:.2f} x (each round {', '.join(f'{x:.2f}' for x in ratios)})",
        f">= {TARGET_RATIO} x", "met" if ratio >= TARGET_RATIO else "MISSED", cpu_note(merged.cpu, merged.errors))]
