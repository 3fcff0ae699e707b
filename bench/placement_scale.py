"""(14) Placement at fleet scale (issue 52): each placement script's own Redis time on a fleet of
10,000 devices on 1,000 hosts with 100,000 tasks queued over 1,000 distinct selectors and 100
teams, against the same calls on a 16-device fleet, in the same run.

The scripts run through the service's own ``Store`` (every call one FCALL, as the routes make it)
on a private ``redis-server`` started for this scenario, whose ``SLOWLOG`` records every call
(``slowlog-log-slower-than 0``): a call's duration there is Redis's own time inside it, which is
what stalls every other host while it runs. The shared Redis is never reconfigured. Each world
then runs the same operations:

- ``create``: a selector task that a free device takes, and one that queues (nothing free fits:
  its candidates are counted in the step), of labels or of a driver alone;
- ``claim`` and ``result``: a host claims its assignment and reports it, freeing the device to
  the backlog (on the large fleet every freed device finds waiting work that fits it);
- ``heartbeat``: a host relabels its devices (each offered the work it can run now), and one
  host of 256 devices relabels them all at once;
- ``setTeam``: a quota lifted on a team with 20,000 tasks queued and free devices waiting for
  it (a bounded slice a call), and the reaper's ``placeLeftOver`` slices that follow;
- a result that takes a team back under its quota of 1 with 5,000 tasks queued.

Targets: no call over 5 ms; each script's p99 within 1.5x the small fleet's. Also Redis memory
per queued task and per pooled device, indexes included.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from collections import defaultdict
from typing import Any

import orjson
from redis.asyncio import Redis

from bench.context import Bench
from bench.drivers import expect
from bench.loadgen import build, connect
from bench.procs import start_server
from bench.report import Row, fmt_ms
from bench.requests import claim_req, result_req
from coordinator.api.auth import token_digest
from coordinator.api.validation import canonical_json
from coordinator.clock import ShiftedClock
from coordinator.state.keys import Keys
from coordinator.state.records import HostPrincipal
from coordinator.state.scripts import load_scripts
from coordinator.state.store import Store
from coordinator.transport.base import PlainTransport

MAX_CALL_MS = 5.0
P99_RATIO = 1.5
DRIVERS = ("adb", "sim")
MODELS = 20
OSES = ("12", "13", "14", "15")
SAMPLES = 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _selector(n: int) -> dict[str, Any]:
    """The n-th of the distinct selectors: a driver, a model and an OS; past the first 160, a
    rack too (some of which no device of the driver has: work that nothing matches)."""
    labels = {"model": f"m{n % MODELS}", "os": OSES[(n // MODELS) % len(OSES)]}
    if n >= len(DRIVERS) * MODELS * len(OSES):
        labels["rack"] = f"r{(n * 7) % 100}"
    return {"driver": DRIVERS[n % len(DRIVERS)], "labels": labels}


def _device(host: int, slot: int, status: str, relabel: int = 0) -> dict[str, Any]:
    """The slot-th device of a host: drivers, models and OSes spread so every selector's first
    160 combinations match some device; its rack is its host's tenth."""
    n = host * 7 + slot + relabel
    return {"device_id": f"d{host:04d}-{slot:03d}", "driver": DRIVERS[n % len(DRIVERS)], "status": status,
            "labels": {"model": f"m{n % MODELS}", "os": OSES[(n // MODELS) % len(OSES)], "rack": f"r{host // 10}"}}


def host_token(n: int) -> str:
    return f"bench-scale-token-{n}"


class World:
    """One deployment on the private Redis, driven through the service's Store."""

    def __init__(self, redis: Redis, name: str) -> None:
        self.redis = redis
        self.keys = Keys(f"bench-scale-{name}:{{s}}")
        self.store = Store(PlainTransport(redis), self.keys, host_offline_after_ms=3_600_000,
                           claim_timeout_ms=3_600_000, retention_ms=3_600_000, scripts=load_scripts(),
                           clock=ShiftedClock())
        self.seq = 0

    def host(self, n: int) -> HostPrincipal:
        return HostPrincipal(f"h{n:04d}", "static", token_digest(host_token(n)))

    async def heartbeat(self, n: int, devices: list[dict[str, Any]]) -> None:
        snapshot = canonical_json({"agent": {}, "devices": sorted(
            ({**d, "attributes": "{}", "labels": canonical_json(d["labels"])} for d in devices),
            key=lambda d: d["device_id"])})
        await self.store.heartbeat(self.host(n), snapshot, "")

    async def create(self, selector: dict[str, Any], team: str, priority: int = 0) -> None:
        self.seq += 1
        task = {"id": f"t_scale-{self.seq}", "kind": "goal", "goal": "Open settings", "max_attempts": 3,
                "driver": selector["driver"], "labels": canonical_json(selector.get("labels", {})),
                "team": team, "priority": priority, "queue_timeout_ms": 86_400_000}
        await self.store.create_task(task)

    async def claim_and_result(self, n: int) -> bool:
        host = self.host(n)
        claimed = await self.store.claim(host, f"c-{self.seq}-{n}", f"l-{self.seq}-{n}", 60_000)
        self.seq += 1
        if claimed is None:
            return False
        got = claimed.assignment
        await self.store.record_result(host, got["task_id"], got["attempt"], got["lease_id"],
                                       canonical_json({"status": "succeeded", "failure_reason": None,
                                                       "metadata": None}))
        return True


async def _gather(calls: list[Any], width: int = 64) -> None:
    for i in range(0, len(calls), width):
        await asyncio.gather(*calls[i:i + width])


async def _slowlog(redis: Redis) -> dict[str, list[float]]:
    """Each script's calls since the last reset, in ms (SLOWLOG of every call), then reset."""
    entries = await redis.execute_command("SLOWLOG", "GET", "-1")
    await redis.execute_command("SLOWLOG", "RESET")
    by_script: dict[str, list[float]] = defaultdict(list)
    for entry in entries:
        args = entry[3]
        if len(args) > 1 and args[0].upper() in (b"FCALL", b"FCALL_RO"):
            name = args[1].decode().rsplit("_", 1)[0]  # the library's functions are <script>_<digest>
            by_script[name].append(int(entry[2]) / 1000)
    return by_script


# The floor of a heartbeat relabelling 256 devices in one step: each record written and moved
# between three labels' indexes, nothing else (no snapshot, no free index, no feed).
RELABEL_FLOOR = """
local t0 = redis.call('TIME')
for i = 1, 256 do
  local id = 'd' .. i
  redis.call('HSET', KEYS[1] .. 'devices', id, cjson.encode({host_id = 'h1', driver = 'adb', status = 'available',
    attributes = '{}', labels = cjson.encode({model = 'm' .. (i % 20), os = '14', rack = 'r1'})}))
  for _, label in ipairs({'model=m' .. ((i + 1) % 20), 'os=13', 'rack=r2'}) do
    redis.call('ZREM', KEYS[1] .. 'pooled_label:adb|' .. label, id)
  end
  for _, label in ipairs({'model=m' .. (i % 20), 'os=14', 'rack=r1'}) do
    redis.call('ZADD', KEYS[1] .. 'pooled_label:adb|' .. label, 0, id)
  end
end
local t1 = redis.call('TIME')
return (tonumber(t1[1]) - tonumber(t0[1])) * 1000000 + tonumber(t1[2]) - tonumber(t0[2])
"""


async def _relabel_floor(redis: Redis) -> list[float]:
    """The floor's time (ms) in five runs, on keys of its own."""
    times = [int(await redis.eval(RELABEL_FLOOR, 1, "bench-scale-floor:{f}:")) / 1000 for _ in range(5)]
    for key in [k async for k in redis.scan_iter(match="bench-scale-floor:*")]:
        await redis.delete(key)
    return times


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


async def _operations(world: World, hosts: int, per_host: int, big_team_queued: int,
                      quota_backlog: int) -> dict[str, list[float]]:
    """The measured operations on a seeded world; each script's times."""
    redis = world.redis
    await redis.execute_command("SLOWLOG", "RESET")
    times: dict[str, list[float]] = defaultdict(list)

    def add(found: dict[str, list[float]], label: str | None = None) -> None:
        for name, values in found.items():
            times[f"{name} ({label})" if label else name] += values

    # results that free devices to the backlog, and the claims before them
    for n in range(SAMPLES):
        await world.claim_and_result(n % hosts)
    add(await _slowlog(redis))
    # creates: queued (every device busy or fitting nothing free) and placed on an idle device
    for n in range(SAMPLES):
        await world.create(_selector(n * 13 % 1000), f"team-{n % 100:03d}")
    add(await _slowlog(redis), "queued")
    for n in range(SAMPLES):  # a selector of a driver alone: its candidates read up to their bound
        await world.create({"driver": DRIVERS[n % len(DRIVERS)]}, f"team-{n % 100:03d}")
    add(await _slowlog(redis), "queued, driver only")
    for n in range(SAMPLES):
        await world.create({"driver": "ios", "labels": {"model": f"i{n % 5}"}}, "team-ios")
    add(await _slowlog(redis), "placed")
    # heartbeats that relabel every device of a host, each offered the work it can run now
    for n in range(SAMPLES):
        host = n % hosts
        await world.heartbeat(host, [_device(host, s, "available", relabel=n + 1) for s in range(per_host)])
    add(await _slowlog(redis), "relabel")
    await world.heartbeat(hosts, [_device(hosts, s, "available", relabel=1) for s in range(256)])
    add(await _slowlog(redis), "relabel 256")
    # a quota lifted on a team with its backlog, free devices waiting for it; then the reaper's slices
    await world.store.set_team("big", {"max_devices": None})
    await world.store.place_left_over(1_000)
    add(await _slowlog(redis), f"quota lifted, {big_team_queued:,} queued")
    # a team back under its quota of 1, its backlog fitting nothing
    solo = world.host(hosts + 1)
    claimed = await world.store.claim(solo, "quota-claim", "quota-lease", 60_000)
    if claimed is not None:
        got = claimed.assignment
        await world.store.record_result(solo, got["task_id"], got["attempt"], got["lease_id"], canonical_json(
            {"status": "succeeded", "failure_reason": None, "metadata": None}))
    add(await _slowlog(redis), f"under quota, {quota_backlog:,} queued")
    return times


async def _http(b: Bench, world: World, redis_port: int, hosts: int) -> dict[str, list[float]]:
    """The HTTP latency (ms) of create (a selector task that queues), claim and result, through a
    coordinator process on the seeded world, one request at a time."""
    static = {world.host(n).host_id: host_token(n) for n in range(hosts)}
    env = b.env(world.keys.prefix, REDIS_URL=f"redis://127.0.0.1:{redis_port}/0")
    coord = await start_server("coordinator", env, static, checkout=b.build)
    times: dict[str, list[float]] = defaultdict(list)
    try:
        conn = await connect(coord.port)
        for n in range(SAMPLES):
            body = {"kind": "goal", "goal": "Open settings", "selector": _selector(n * 17 % 1000),
                    "team": f"team-{n % 100:03d}"}
            t0 = time.perf_counter()
            await expect(conn, build("POST", "/api/v1/tasks", b.admin, body), 201)
            times["create (HTTP)"].append((time.perf_counter() - t0) * 1000)
        for n in range(SAMPLES):
            host = world.host(n % hosts).host_id
            t0 = time.perf_counter()
            raw = await expect(conn, claim_req(host, static[host], 0), 200, 204)
            t1 = time.perf_counter()
            times["claim (HTTP)"].append((t1 - t0) * 1000)
            if raw:
                await expect(conn, result_req(host, static[host], orjson.loads(raw)), 200)
                times["result (HTTP)"].append((time.perf_counter() - t1) * 1000)
        conn.close()
    finally:
        coord.stop()
    return times


async def _seed(world: World, hosts: int, per_host: int, queued: int, big_team_queued: int,
                quota_backlog: int) -> tuple[float, float]:
    """The fleet (every device busy, so the backlog stays queued), the backlog, an idle iOS rack
    nothing waits for, team `big` at a quota of 0 with its backlog and idle devices it fits, and
    team `solo` holding its one device with a backlog no device matches. Redis memory per pooled
    device and per queued task, indexes included."""
    redis = world.redis
    base = int((await redis.info("memory"))["used_memory"])
    await _gather([world.heartbeat(h, [_device(h, s, "busy") for s in range(per_host)]) for h in range(hosts)])
    after_devices = int((await redis.info("memory"))["used_memory"])
    await _gather([world.create(_selector(n % 1000), f"team-{n % 100:03d}", priority=(0, 0, 5, -5)[n % 4])
                   for n in range(queued)])
    after_tasks = int((await redis.info("memory"))["used_memory"])
    # every device available now: each takes the waiting task the order gives it
    await _gather([world.heartbeat(h, [_device(h, s, "available") for s in range(per_host)]) for h in range(hosts)])
    await world.heartbeat(hosts, [_device(hosts, s, "busy") for s in range(256)])
    # idle devices nothing waits for (creates of "placed" take them)
    await world.heartbeat(hosts + 2, [{"device_id": f"ios-{i:04d}", "driver": "ios", "status": "available",
                                       "labels": {"model": f"i{i % 5}"}} for i in range(min(hosts, 1000))])
    await world.store.set_team("big", {"max_devices": 0})
    await _gather([world.create({"driver": "lab", "labels": {"kind": f"k{n % 50}"}}, "big")
                   for n in range(big_team_queued)])
    await world.heartbeat(hosts + 3, [{"device_id": f"lab-{i:04d}", "driver": "lab", "status": "available",
                                       "labels": {"kind": f"k{i % 50}"}} for i in range(100)])
    # team solo: quota 1, holding its one device (host hosts+1), its backlog fitting nothing
    await world.store.set_team("solo", {"max_devices": 1})
    await world.heartbeat(hosts + 1, [{"device_id": "solo-0", "driver": "solo", "status": "available",
                                       "labels": {}}])
    await world.create({"driver": "solo", "labels": {}}, "solo")
    await _gather([world.create({"driver": "solo", "labels": {"model": f"x{n % 200}"}}, "solo")
                   for n in range(quota_backlog)])
    devices = hosts * per_host
    return (after_devices - base) / devices, (after_tasks - after_devices) / queued


async def placement_scale(b: Bench) -> list[Row]:
    large = b.preset.name == "full" or os.environ.get("TETHER_BENCH_SCALE") == "full"
    sizes = {"small": (2, 8, 64, 200, 100), "large": (1_000, 10, 100_000, 20_000, 5_000) if large
             else (200, 10, 20_000, 4_000, 1_000)}
    server = shutil.which("redis-server")
    if server is None:
        return [Row("14 placement at scale", "redis-server not found", "n/a", "", "", "", "")]
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="tether-scale-")
    proc = await asyncio.create_subprocess_exec(
        server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir,
        "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1000000",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    redis = Redis(port=port)
    try:
        for _ in range(100):
            try:
                await redis.ping()
                break
            except Exception:  # noqa: BLE001 - not up yet
                await asyncio.sleep(0.05)
        figures: dict[str, dict[str, list[float]]] = {}
        memory: dict[str, tuple[float, float]] = {}
        for name, (hosts, per_host, queued, big, solo) in sizes.items():
            world = World(redis, name)
            await world.store.load_scripts()
            t0 = time.monotonic()
            memory[name] = await _seed(world, hosts, per_host, queued, big, solo)
            print(f"bench: scale {name}: seeded {hosts * per_host:,} devices, {queued + big + solo:,} queued "
                  f"in {time.monotonic() - t0:.0f} s", flush=True)
            figures[name] = await _operations(world, hosts, per_host, big, solo)
            figures[name].update(await _http(b, world, port, hosts))
        return _rows(figures, memory, sizes["large"], await _relabel_floor(redis))
    finally:
        await redis.aclose()
        proc.terminate()
        await proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _rows(figures: dict[str, dict[str, list[float]]], memory: dict[str, tuple[float, float]],
          large: tuple[int, int, int, int, int], floor: list[float]) -> list[Row]:
    hosts, per_host, queued, _, _ = large
    rows = []
    small = figures["small"]
    for label, values in sorted(figures["large"].items()):
        name = label.split(" (")[0]
        base = small.get(label) or small.get(name) or []
        worst = max(values)
        p99, base_p99 = _pct(values, 0.99), _pct(base, 0.99)
        ratio = p99 / base_p99 if base else float("nan")
        within = worst <= MAX_CALL_MS and (not base or ratio <= P99_RATIO or p99 <= 0.1)
        rows.append(Row(
            f"14 {label}", f"{len(values)} calls, {hosts * per_host:,} devices, {queued:,} queued",
            f"p50 {fmt_ms(_pct(values, 0.5))}, p99 {fmt_ms(p99)}, max {fmt_ms(worst)}; small p99 {fmt_ms(base_p99)}",
            f"{ratio:.2f}x small" if base else "", f"max <= {MAX_CALL_MS:g} ms, p99 <= {P99_RATIO:g}x small",
            "met" if within else "MISSED", ""))
    rows.append(Row("14f relabel floor", "256 device records written, each moved between 3 labels' indexes",
                    f"median {fmt_ms(_pct(floor, 0.5))} of {len(floor)} runs", "", f"<= {MAX_CALL_MS:g} ms",
                    "out of reach: the floor is at the bound" if _pct(floor, 0.5) >= 0.8 * MAX_CALL_MS else "", ""))
    per_device, per_task = memory["large"]
    rows.append(Row("14 memory", "Redis used_memory growth", f"{per_device:.0f} B a pooled device, "
                    f"{per_task:.0f} B a queued task (indexes included)", "", "", "", ""))
    return rows


def main() -> None:
    """``python -m bench.placement_scale``: this scenario alone, its rows printed."""
    from bench.context import PRESETS

    async def run() -> None:
        b = Bench(PRESETS["full" if os.environ.get("TETHER_BENCH_SCALE") == "full" else "small"],
                  "redis://127.0.0.1:6379/0", Redis(), 0, 6379)
        for row in await placement_scale(b):
            print(f"{row.item} | {row.measure} | {row.result} | {row.ratio} | {row.target} | {row.verdict}")

    asyncio.run(run())


if __name__ == "__main__":
    main()
