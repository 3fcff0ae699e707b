"""Driving HTTP with wrk (Debian's package ``wrk``: ``apt-get install wrk``), a C load generator
that drives a server far harder than any Python client on the same cores.

wrk sends the same pre-built request bytes the Python generator would (a Lua script cycles
through them, each thread from its own offset), and reports its count, latency percentiles and
errors as one JSON line. Its own CPU is measured too (it is a child process: its rusage), so a
result says how much of the machine the generator took.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.loadgen import LoadResult
from bench.system import CpuWindow

INSTALL_HINT = "wrk is not installed: apt-get update && apt-get install -y wrk"

_SCRIPT = """
local requests = {%s}
local next_index = 1
local thread_count = 0

function setup(thread)
  thread_count = thread_count + 1
  thread:set("first", thread_count)
end

function init(args)
  next_index = ((first or 1) * 7) %% #requests + 1
end

function request()
  local raw = requests[next_index]
  next_index = next_index %% #requests + 1
  return raw
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, "status_errors": %%d, ' ..
    '"socket_errors": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
"""


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def _lua_string(raw: bytes) -> str:
    """``raw`` as a Lua string literal: every byte as a decimal escape, so nothing needs quoting."""
    return '"' + "".join(f"\\{b}" for b in raw) + '"'


def _script(raws: list[bytes], folder: Path) -> Path:
    path = folder / "requests.lua"
    path.write_text(_SCRIPT % ", ".join(_lua_string(r) for r in raws))
    return path


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def wrk_load(port: int, raws: list[bytes], duration_s: float, connections: int, watch: dict[str, int],
                   threads: int = 2, warmup_s: float = 0.0) -> LoadResult:
    """Closed-loop load from wrk: ``connections`` keep-alive connections on ``threads`` threads,
    each sending the next of ``raws`` as soon as its last answer came. CPU of the ``watch``
    processes and of wrk itself ("generator") is measured over the window."""
    if not wrk_available():
        raise RuntimeError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="tether-wrk-") as folder:
        script = _script(raws, Path(folder))

        def run(seconds: float) -> tuple[dict[str, int], float]:
            started = time.perf_counter()
            out = subprocess.run(
                ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s", "--latency",
                 "-s", str(script), f"http://127.0.0.1:{port}/"],
                capture_output=True, text=True, check=True, timeout=seconds + 60,
            ).stdout
            line = next(x for x in out.splitlines() if x.startswith("{"))
            return json.loads(line), time.perf_counter() - started

        if warmup_s:
            await asyncio.to_thread(run, warmup_s)
        window = CpuWindow(watch)
        before = _children_cpu_s()
        window.start()
        report, _ = await asyncio.to_thread(run, duration_s)
        cpu = window.stop()
    seconds = report["duration_us"] / 1e6
    cpu["generator"] = (_children_cpu_s() - before) / seconds if seconds else 0.0
    result = LoadResult(count=report["requests"], errors=report["status_errors"] + report["socket_errors"],
                        seconds=seconds, cpu=cpu)
    result.extra["p50_ms"] = report["p50_us"] / 1000
    result.extra["p99_ms"] = report["p99_us"] / 1000
    return result


def redis_evalsha_floor(port: int, requests: int = 200_000, clients: int = 64) -> float:
    """What Redis alone serves of the floor's work: ``EVALSHA`` of ``return 1`` from
    redis-benchmark (C, pipelining off), in requests per second."""
    sha = subprocess.run(["redis-cli", "-p", str(port), "SCRIPT", "LOAD", "return 1"],
                         capture_output=True, text=True, check=True).stdout.strip()
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(requests), "-c", str(clients), "-q",
                          "EVALSHA", sha, "0"], capture_output=True, text=True, check=True).stdout
    # "EVALSHA ...: 85324.23 requests per second, p50=0.391 msec"
    for chunk in out.replace("\r", "\n").splitlines():
        if "requests per second" in chunk:
            return float(chunk.split(":")[1].split("requests")[0])
    raise RuntimeError(f"redis-benchmark printed no rate: {out!r}")
