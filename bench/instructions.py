"""python -m bench.instructions [TREE ...]: the instructions a lifecycle costs the coordinator's
own Python, counted by callgrind, for each build and for the lifecycle floor.

Timings on this shared VM drift by tens of percent within minutes; an instruction count does not.
Each TREE (a checkout of this repository, a ``git worktree`` of another commit, say; this one by
default) serves lifecycles in-process through ASGI, with no HTTP server: create, claim, renew
and result, 64 hosts at once as row 3's load, so the auto-pipeline batches as it does there. The
count covers the handlers, Starlette, the auto-pipeline and redis-py; not uvicorn, the kernel or
Redis. The floor's app (bench/floor_app.py, this checkout) serves the same four calls doing one
script each. The driver imports nothing of this repository but the app it drives, so any
commit's checkout can be measured. Each is run under valgrind twice, with 10 and 30 lifecycles
per host: the difference over the extra lifecycles leaves out start-up and imports. It needs
valgrind (Debian's package); each run takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import orjson
import uvloop
from redis.asyncio import Redis
from starlette.types import ASGIApp, Message

REPO = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
HOSTS = 64
RUNS = (10, 30)  # lifecycles per host of the two runs whose difference is counted
WARM = 8  # hosts whose lifecycles warm up each run (scripts loaded, connections open)


async def _call(app: ASGIApp, method: str, path: str, token: str, body: Any = None, query: bytes = b"") -> bytes:
    raw = b"" if body is None else orjson.dumps(body)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "",
             "headers": [(b"authorization", b"Bearer " + token.encode()),
                         (b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}, "extensions": {}}
    sent: list[Message] = []
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive() -> Message:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # never disconnects
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = sent[0]["status"]
    if status >= 300:
        raise RuntimeError(f"{method} {path} answered {status}")
    return b"".join(m.get("body", b"") for m in sent[1:])


async def _lifespan(app: ASGIApp, event: str, queue: asyncio.Queue[Message], answers: asyncio.Queue[Message]) -> None:
    await queue.put({"type": f"lifespan.{event}"})
    answer = await answers.get()
    if not answer["type"].endswith(".complete"):
        raise RuntimeError(f"lifespan {event} failed: {answer}")


async def drive(kind: str, per_host: int, prefix: str) -> None:
    """``per_host`` lifecycles on each host, all hosts at once, through ``kind``'s app in-process,
    on the key prefix ``prefix`` (the caller deletes its keys)."""
    from coordinator.settings import Settings

    admin = "bench-admin-" + uuid.uuid4().hex
    hosts = [(f"h{i:05d}", f"bench-instructions-token-{i:05d}") for i in range(HOSTS)]
    settings = Settings(redis_url=REDIS_URL, key_prefix=prefix, admin_token=admin, host_offline_after_s=3600,
                        static_hosts=dict(hosts))
    redis = Redis.from_url(REDIS_URL)
    if kind == "tether":
        from coordinator.app import create_app
        app: ASGIApp = create_app(settings)
    else:
        from bench.floor_app import create_floor_app
        from bench.floor_lifecycle import LifecycleFloor
        app = create_floor_app(settings)
        await LifecycleFloor(redis, prefix).add_free([f"{h}-d0" for h, _ in hosts])
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    serving = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                        inbox.get, outbox.put))
    await _lifespan(app, "startup", inbox, outbox)
    try:
        if kind == "tether":
            for host, token in hosts:
                device = {"device_id": f"{host}-d0", "driver": "adb", "status": "available",
                          "attributes": {"model": "Pixel 7", "os_version": "14"}, "labels": {"tier": "a"}}
                await _call(app, "PUT", f"/internal/v1/hosts/{host}/heartbeat", token,
                            {"devices": [device], "agent": {"version": "bench", "hostname": host}})

        async def lifecycles(host: str, token: str, count: int) -> None:
            for _ in range(count):
                await _call(app, "POST", "/api/v1/tasks", admin,
                            {"kind": "goal", "goal": "Turn on airplane mode", "device_id": f"{host}-d0"})
                claimed = await _call(app, "POST", f"/internal/v1/hosts/{host}/claim", token, query=b"wait_s=5")
                a = orjson.loads(claimed)
                await _call(app, "POST", f"/internal/v1/hosts/{host}/leases/{a['lease_id']}/renew", token, {
                    "task_id": a["task_id"], "attempt": a["attempt"],
                    "progress": {"step_index": 1, "status": "running", "summary": "Opened Settings"}})
                await _call(app, "POST", f"/internal/v1/hosts/{host}/results", token, {
                    "task_id": a["task_id"], "attempt": a["attempt"], "lease_id": a["lease_id"],
                    "status": "succeeded", "failure_reason": None, "metadata": {"steps": 3}})

        await asyncio.gather(*(lifecycles(h, t, per_host) for h, t in hosts[:WARM]))
        await asyncio.gather(*(lifecycles(h, t, per_host) for h, t in hosts))
    finally:
        await _lifespan(app, "shutdown", inbox, outbox)
        await serving
        await redis.aclose()


def instructions(tree: Path, kind: str, per_host: int) -> int:
    """The instructions valgrind counted in one run of ``drive`` from ``tree``."""
    prefix = f"bench-instructions-{uuid.uuid4().hex[:8]}:{{b}}"
    try:
        with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
            done = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                 sys.executable, __file__, "--drive", kind, str(per_host), prefix],
                cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    finally:
        asyncio.run(_delete_keys(prefix))
    collected = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or collected is None:
        raise RuntimeError(f"{kind} in {tree} failed: {done.stderr[-800:]}")
    return int(collected[1])


async def _delete_keys(prefix: str) -> None:
    from bench.procs import delete_prefix  # here, not at the top: the driver imports none of bench

    redis = Redis.from_url(REDIS_URL)
    try:
        await delete_prefix(redis, prefix)
    finally:
        await redis.aclose()


def per_lifecycle(tree: Path, kind: str) -> float:
    low, high = (instructions(tree, kind, n) for n in RUNS)
    return (high - low) / ((HOSTS + WARM) * (RUNS[1] - RUNS[0]))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[REPO])
    parser.add_argument("--drive", nargs=3, metavar=("KIND", "PER_HOST", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        # Run as a script: its own folder (bench/) is first on sys.path, where its modules would
        # shadow installed ones (requests, profile); the app comes from PYTHONPATH, the tree.
        here = Path(__file__).resolve().parent
        sys.path[:] = [entry for entry in sys.path if not entry or Path(entry).resolve() != here]
        uvloop.run(drive(args.drive[0], int(args.drive[1]), args.drive[2]))
        return 0
    floor = per_lifecycle(REPO, "floor")
    print(f"{'build':50s} {'instructions per lifecycle':>28s} {'x floor':>8s}")
    print(f"{'floor (bench/floor_app.py)':50s} {floor:28,.0f} {1:8.2f}")
    for tree in args.trees:
        count = per_lifecycle(tree.resolve(), "tether")
        print(f"{str(tree):50s} {count:28,.0f} {count / floor:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
