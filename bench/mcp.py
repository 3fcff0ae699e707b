"""(15) A tap's round trip through /mcp against the same tap through the operator API, in turns
(issue 55: the MCP path within 1.5 x the API's at p50). One coordinator, one real agent
(``python -m agent``) with a sim phone, one live session; each turn sends one tap at an empty spot
of the home screen (so the screen stays as it is) through each path: the operator API's
``POST /api/v1/tasks/{id}/commands`` with the bench's lean client, and the MCP ``tap`` tool with
the official SDK's client (Streamable HTTP, as an agent calls it), whose answer adds the screen's
bytes as an image and the elements as text. Both wait for the agent to perform the tap and answer
with its screen. ``python -m bench --only mcp --no-docs`` measures it alone."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time

import httpx2
import orjson
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench.context import Bench
from bench.loadgen import build, connect, percentile
from bench.procs import start_server
from bench.report import Row, fmt_ms

HOST, HOST_TOKEN, DEVICE = "bench-mcp-host", "bench-mcp-host-token-0123456789", "phone-1"
TAP = {"action": "tap", "x": 540, "y": 1500}  # below the home screen's two apps: nothing there
TARGET_RATIO = 1.5
WARMUP = 5


def _agent(port: int, workdir: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COORDINATOR_", "HOST_AGENT_"))}
    env.update({"HOST_AGENT_URL": f"http://127.0.0.1:{port}", "HOST_AGENT_HOST_ID": HOST,
                "HOST_AGENT_TOKEN": HOST_TOKEN, "HOST_AGENT_DEVICES": f"sim:{DEVICE}",
                "HOST_AGENT_WORKFLOWS_DIR": "none", "HOST_AGENT_HEARTBEAT_INTERVAL_S": "1"})
    return subprocess.Popen([sys.executable, "-m", "agent"], env=env, cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _until(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench mcp: no {what} in {timeout_s:g} s")
        await asyncio.sleep(0.1)


async def mcp_tap(b: Bench) -> list[Row]:
    prefix = b.prefix("mcp")
    coord = await start_server("coordinator", b.env(prefix), {HOST: HOST_TOKEN}, checkout=b.build)
    workdir = tempfile.TemporaryDirectory(prefix="bench-mcp-")  # the agent's working folder
    agent = _agent(coord.port, workdir.name)
    conn = await connect(coord.port)
    try:
        async def pooled() -> bool:
            _, body = await conn.request(build("GET", "/api/v1/devices", b.admin))
            return any(d["device_id"] == DEVICE and d["status"] == "available" for d in orjson.loads(body)["devices"])

        await _until(pooled, "pooled sim phone")
        _, body = await conn.request(build("POST", "/api/v1/tasks", b.admin, {
            "kind": "session", "device_id": DEVICE, "idle_timeout_s": 600}))
        task_id = orjson.loads(body)["task_id"]

        async def running() -> bool:
            _, body = await conn.request(build("GET", f"/api/v1/tasks/{task_id}", b.admin))
            return bool(orjson.loads(body)["status"] == "running")

        await _until(running, "running session")
        api_tap = build("POST", f"/api/v1/tasks/{task_id}/commands?wait_s=30", b.admin, {"action": TAP})
        headers = {"authorization": f"Bearer {b.admin}"}
        async with (httpx2.AsyncClient(headers=headers, timeout=60) as http,
                    streamable_http_client(f"http://127.0.0.1:{coord.port}/mcp", http_client=http) as (read, write),
                    ClientSession(read, write) as session):
            await session.initialize()
            arguments = {"session_id": task_id, "x": TAP["x"], "y": TAP["y"]}

            async def via_api() -> float:
                t0 = time.perf_counter()
                status, body = await conn.request(api_tap, timeout=60)
                if status != 200:
                    raise RuntimeError(f"bench mcp: the API's tap answered {status}: {body[:200]!r}")
                return time.perf_counter() - t0

            async def via_mcp() -> float:
                t0 = time.perf_counter()
                result = await session.call_tool("tap", arguments)
                if result.is_error:
                    raise RuntimeError(f"bench mcp: the MCP tap failed: {result.content}")
                return time.perf_counter() - t0

            for _ in range(WARMUP):
                await via_api()
                await via_mcp()
            api: list[float] = []
            mcp: list[float] = []
            turns = max(30, b.preset.rounds * 25)
            for turn in range(turns):  # in turns, each path first every other time: drift hits both
                first, second = (via_api, via_mcp) if turn % 2 == 0 else (via_mcp, via_api)
                one, two = await first(), await second()
                api.append(one if first is via_api else two)
                mcp.append(two if first is via_api else one)
        await conn.request(build("POST", f"/api/v1/tasks/{task_id}/end", b.admin))
    finally:
        conn.close()
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        coord.stop()
        await b.cleanup(prefix)
        workdir.cleanup()
    a50, m50 = percentile(api, 50) * 1000, percentile(mcp, 50) * 1000
    ratio = m50 / a50
    return [Row("15", f"a tap's round trip to a sim phone's agent and back: MCP tool (SDK client) vs the "
                      f"operator API, in turns (p50 / p99 of {len(api)} each)",
                f"MCP {fmt_ms(m50)} / {fmt_ms(percentile(mcp, 99) * 1000)}, API {fmt_ms(a50)} / "
                f"{fmt_ms(percentile(api, 99) * 1000)}",
                f"{ratio:.2f} x", f"MCP <= {TARGET_RATIO:g} x API (p50)",
                "met" if ratio <= TARGET_RATIO else "MISSED", "")]
