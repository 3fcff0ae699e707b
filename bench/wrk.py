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
import math
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.loadgen import LoadResult
from bench.system import CpuWindow

INSTALL_HINT = "wrk is not installed: apt-get update && apt-get install -y wrk"

_SCRIPT = """
local requests = {%s}
local next_index = 1

function init(args)
  next_index = ((id or 1) * 7) %% #requests + 1
end

function request()
  local raw = requests[next_index]
  next_index = next_index %% #requests + 1
  return raw
end
"""

# Every script numbers its threads from 1 (`id`, a global of each thread), so that threads start
# at different requests and name their uploads apart.
_NUMBERED = """
local thread_count = 0

function setup(thread)
  thread_count = thread_count + 1
  thread:set("id", thread_count)
end
"""

# What every run of a request-counting script prints (its JSON line, read by _run_wrk).
_DONE = """
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "status_errors": %d, ' ..
    '"socket_errors": %d}\\n',
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
    path.write_text(_SCRIPT % ", ".join(_lua_string(r) for r in raws) + _NUMBERED + _DONE)
    return path


def wrk_args(port: int, script: Path, threads: int, connections: int, seconds: float) -> list[str]:
    """wrk's command line. wrk takes whole seconds (``-d 7.5s`` is an error), so a window is
    rounded up to the next whole second, and is never under one."""
    whole = max(1, math.ceil(seconds))
    return ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{whole}s", "--latency", "-s", str(script),
            f"http://127.0.0.1:{port}/"]


def _run_wrk(port: int, script: Path, threads: int, connections: int, seconds: float) -> dict[str, int]:
    """One wrk run; the JSON line its script's ``done`` wrote. A failed run raises with wrk's own
    words, so a reader sees why it could not measure."""
    args = wrk_args(port, script, threads, connections, seconds)
    done = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:-1])} exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def wrk_load(port: int, raws: list[bytes], duration_s: float, connections: int, watch: dict[str, int],
                   threads: int = 2, warmup_s: float = 0.0) -> LoadResult:
    """Closed-loop load from wrk: ``connections`` keep-alive connections on ``threads`` threads,
    each sending the next of ``raws`` as soon as its last answer came. CPU of the ``watch``
    processes and of wrk itself ("generator") is measured over the window."""
    with tempfile.TemporaryDirectory(prefix="tether-wrk-") as folder:
        return await _measured(port, _script(raws, Path(folder)), duration_s, connections, watch, threads, warmup_s)


_UPLOADS = """
-- Each request uploads the same body under a new name, for the next of the leases in turn.
local leases = {%(leases)s}
local body = "\\137PNG\\r\\n\\26\\n" .. string.rep("s", %(size)d - 8)

function init(args)
  n = 0
end

function request()
  n = n + 1
  local lease = leases[n %% #leases + 1]
  return wrk.format("PUT", lease[1] .. "t" .. id .. "-" .. n .. ".png" .. lease[2],
    {["Authorization"] = "Bearer " .. lease[3], ["Content-Type"] = "image/png"}, body)
end
"""


async def wrk_uploads(port: int, leases: list[tuple[str, str, str]], size: int, duration_s: float,
                      connections: int, watch: dict[str, int], warmup_s: float = 0.0) -> LoadResult:
    """Closed-loop uploads from wrk: each request a body of ``size`` bytes under a new name, for
    the next of ``leases`` ((path up to the name, query, bearer token)) in turn."""
    listed = ", ".join("{" + ", ".join(_lua_string(part.encode()) for part in lease) + "}" for lease in leases)
    script = _UPLOADS % {"size": size, "leases": listed} + _NUMBERED + _DONE
    with tempfile.TemporaryDirectory(prefix="tether-wrk-") as folder:
        path = Path(folder) / "uploads.lua"
        path.write_text(script)
        return await _measured(port, path, duration_s, connections, watch, 2, warmup_s)


async def _measured(port: int, script: Path, duration_s: float, connections: int, watch: dict[str, int],
                    threads: int, warmup_s: float) -> LoadResult:
    """One wrk window of ``script`` (after a warm-up run), with the CPU of ``watch`` and of wrk."""
    if not wrk_available():
        raise RuntimeError(INSTALL_HINT)
    if warmup_s:
        await asyncio.to_thread(_run_wrk, port, script, threads, connections, warmup_s)
    window = CpuWindow(watch)
    before = _children_cpu_s()
    window.start()
    report = await asyncio.to_thread(_run_wrk, port, script, threads, connections, duration_s)
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


_LIFECYCLE_SCRIPT = """
-- One simulated host per thread, on one connection: create (operator API) -> claim -> renew ->
-- result, back to back; the claim's answer gives the lease the next two calls name.
local hosts = {%(hosts)s}
local admin = %(admin)s
local goal = %(goal)s
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("index", counter)
  table.insert(threads, thread)
end

function init(args)
  local h = hosts[index]
  host, token = h[1], h[2]
  step, lifecycles, failures = 0, 0, 0
  task, lease, attempt = nil, nil, nil
end

-- With artifacts on, one screenshot of %(upload_bytes)d bytes goes up between renew and result.
local upload = nil
if %(upload_bytes)d > 0 then
  upload = "\\137PNG\\r\\n\\26\\n" .. string.rep("s", %(upload_bytes)d - 8)
end
local last = upload and 4 or 3

local function post(path, bearer, body)
  return wrk.format("POST", path, {["Authorization"] = "Bearer " .. bearer,
                                   ["Content-Type"] = "application/json"}, body)
end

function request()
  if step == 0 then
    return post("/api/v1/tasks", admin,
      '{"kind":"goal","goal":"' .. goal .. '","device_id":"' .. host .. '-d0"}')
  elseif step == 1 then
    return post("/internal/v1/hosts/" .. host .. "/claim?wait_s=5", token, "{}")
  elseif step == 2 then
    return post("/internal/v1/hosts/" .. host .. "/leases/" .. lease .. "/renew", token,
      '{"task_id":"' .. task .. '","attempt":' .. attempt ..
      ',"progress":{"step_index":1,"status":"running","summary":"Opened Settings"}}')
  elseif step == 3 and upload then
    return wrk.format("PUT", "/internal/v1/hosts/" .. host .. "/leases/" .. lease ..
      "/artifacts/step-1.png?step_index=1&task_id=" .. task .. "&attempt=" .. attempt,
      {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "image/png"}, upload)
  end
  return post("/internal/v1/hosts/" .. host .. "/results", token,
    '{"task_id":"' .. task .. '","attempt":' .. attempt .. ',"lease_id":"' .. lease ..
    '","status":"succeeded","failure_reason":null,"metadata":{"steps":3}}')
end

function response(status, headers, body)
  if status >= 300 or (step == 1 and status ~= 200) then
    failures = failures + 1
    step = 0  -- start over with a new task
    return
  end
  if step == 1 then
    task = body:match('"task_id":"([^"]+)"')
    lease = body:match('"lease_id":"([^"]+)"')
    attempt = body:match('"attempt":(%%d+)')
  end
  step = (step + 1) %% (last + 1)
  if step == 0 then
    lifecycles = lifecycles + 1
  end
end

function done(summary, latency, requests)
  local total, failed = 0, 0
  for _, thread in ipairs(threads) do
    total = total + thread:get("lifecycles")
    failed = failed + thread:get("failures")
  end
  io.write(string.format('{"lifecycles": %%d, "failures": %%d, "requests": %%d, "duration_us": %%d}\\n',
    total, failed, summary.requests, summary.duration))
end
"""


_STEADY_SCRIPT = """
-- One simulated host per thread, on one connection, its device busy in a steady state (eager
-- dispatch, PROTOCOL.md results): it keeps one task queued ahead of the one it runs, so each job
-- is create (queued behind the running one) -> renew -> result with "next": true, whose answer
-- carries the next assignment. The first job (and any after a failure) is claimed.
local hosts = {%(hosts)s}
local admin = %(admin)s
local goal = %(goal)s
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("index", counter)
  table.insert(threads, thread)
end

function init(args)
  local h = hosts[index]
  host, token = h[1], h[2]
  step, held, lifecycles, failures = "create", false, 0, 0
  task, lease, attempt = nil, nil, nil
end

local function post(path, bearer, body)
  return wrk.format("POST", path, {["Authorization"] = "Bearer " .. bearer,
                                   ["Content-Type"] = "application/json"}, body)
end

local function take(text)
  task = text:match('"task_id":"([^"]+)"')
  lease = text:match('"lease_id":"([^"]+)"')
  attempt = text:match('"attempt":(%%d+)')
end

function request()
  if step == "create" then
    return post("/api/v1/tasks", admin,
      '{"kind":"goal","goal":"' .. goal .. '","device_id":"' .. host .. '-d0"}')
  elseif step == "claim" then
    return post("/internal/v1/hosts/" .. host .. "/claim?wait_s=5", token, "{}")
  elseif step == "renew" then
    return post("/internal/v1/hosts/" .. host .. "/leases/" .. lease .. "/renew", token,
      '{"task_id":"' .. task .. '","attempt":' .. attempt ..
      ',"progress":{"step_index":1,"status":"running","summary":"Opened Settings"}}')
  end
  return post("/internal/v1/hosts/" .. host .. "/results", token,
    '{"task_id":"' .. task .. '","attempt":' .. attempt .. ',"lease_id":"' .. lease ..
    '","status":"succeeded","failure_reason":null,"metadata":{"steps":3},"next":true}')
end

function response(status, headers, body)
  if status >= 300 or (step == "claim" and status ~= 200) then
    failures = failures + 1
    step, held = "claim", false  -- claim whatever is assigned (a 204 waits for it, up to wait_s)
    return
  end
  if step == "create" then
    step = held and "renew" or "claim"
  elseif step == "claim" then
    take(body)
    step, held = "create", true  -- one task queued ahead of the one now running
  elseif step == "renew" then
    step = "result"
  else
    lifecycles = lifecycles + 1
    local following = body:match('"next_assignment":(%%b{})')
    if following then
      take(following)
      step = "create"
    else
      step, held = "create", false
    end
  end
end

function done(summary, latency, requests)
  local total, failed = 0, 0
  for _, thread in ipairs(threads) do
    total = total + thread:get("lifecycles")
    failed = failed + thread:get("failures")
  end
  io.write(string.format('{"lifecycles": %%d, "failures": %%d, "requests": %%d, "duration_us": %%d}\\n',
    total, failed, summary.requests, summary.duration))
end
"""


async def wrk_lifecycles(ports: tuple[int, ...], hosts: list[tuple[str, str]], admin: str, goal: str,
                         duration_s: float, watch: dict[str, int], upload_bytes: int = 0,
                         steady: bool = False) -> LoadResult:
    """Closed-loop lifecycles from wrk, one host per wrk thread and connection; the hosts are
    split between the coordinator processes at ``ports``, one wrk process each. With
    ``upload_bytes``, each lifecycle also uploads a screenshot of that size after its renewal.
    ``steady``: each host keeps one task queued ahead, so a lifecycle is create + renew + a
    result carrying the next assignment (eager dispatch)."""
    if not wrk_available():
        raise RuntimeError(INSTALL_HINT)
    shares = [hosts[i::len(ports)] for i in range(len(ports))]
    with tempfile.TemporaryDirectory(prefix="tether-wrk-") as folder:
        scripts = []
        for i, share in enumerate(shares):
            path = Path(folder) / f"lifecycle-{i}.lua"
            path.write_text((_STEADY_SCRIPT if steady else _LIFECYCLE_SCRIPT) % {
                "hosts": ", ".join(f"{{{_lua_string(h.encode())}, {_lua_string(t.encode())}}}" for h, t in share),
                "admin": _lua_string(admin.encode()), "goal": _lua_string(goal.encode()),
                "upload_bytes": upload_bytes,
            })
            scripts.append(path)

        window = CpuWindow(watch)
        before = _children_cpu_s()
        window.start()
        reports = await asyncio.gather(*(asyncio.to_thread(_run_wrk, port, script, len(share), len(share), duration_s)
                                         for port, script, share in zip(ports, scripts, shares, strict=True)))
        cpu = window.stop()
    seconds = max(r["duration_us"] for r in reports) / 1e6
    cpu["generator"] = (_children_cpu_s() - before) / seconds if seconds else 0.0
    return LoadResult(count=sum(r["lifecycles"] for r in reports), errors=sum(r["failures"] for r in reports),
                      seconds=seconds, cpu=cpu)
