"""Benchmark server processes (started, awaited until they answer, stopped), and what Redis says
about them: their connections (`CLIENT LIST` matched against /proc), and a bench prefix's keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bench.loadgen import build, connect
from bench.system import free_port
from coordinator.state.keys import Keys

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Build:
    """The coordinator a run measures: a checkout and the Python that runs it (this one's, or
    another commit's in a worktree and venv of its own, ``bench/ab.py``)."""

    tree: Path = REPO
    python: str = sys.executable


def _local_ports_to(pid: int, remote_port: int) -> set[int]:
    """Local ports of the process's established TCP connections to ``remote_port``: its sockets
    (from /proc/PID/fd) matched by inode against /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[9] in inodes and cols[3] == "01" and int(cols[2].rsplit(":", 1)[1], 16) == remote_port:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


async def redis_connections(redis: Redis, pid: int, redis_port: int) -> int:
    """Connections Redis lists in CLIENT LIST whose client address is a socket of ``pid``."""
    ports = _local_ports_to(pid, redis_port)
    clients = await redis.client_list()
    return sum(1 for c in clients if int(c["addr"].rsplit(":", 1)[1]) in ports)


async def redis_info(redis: Redis) -> tuple[str, int, int]:
    """(version, pid, tcp port) of the Redis server."""
    info = await redis.info("server")
    return str(info["redis_version"]), int(info["process_id"]), int(info["tcp_port"])


@dataclass
class Server:
    """A benchmark server process (coordinator or floor) on a loopback port."""

    process: subprocess.Popen[bytes]
    port: int
    log: Any

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


async def start_server(kind: str, env: dict[str, str], hosts: dict[str, str] | None = None,
                       checkout: Build = Build()) -> Server:
    """Start ``python -m bench.server KIND`` of ``checkout`` and wait until it answers. Static hosts
    go through a file because Linux caps one environment string at 128 KiB, less than 10,000
    hosts' JSON."""
    port = free_port()
    tree = checkout.tree
    args = [checkout.python, "-m", "bench.server", kind, "--port", str(port)]
    if tree != REPO:
        env = {**env, "PYTHONPATH": str(tree)}
    log = tempfile.TemporaryFile()  # noqa: SIM115 - the Server owns it and closes it when it stops
    if hosts is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as hosts_file:
            json.dump(hosts, hosts_file)
        args += ["--hosts-file", hosts_file.name]
    process = subprocess.Popen(  # noqa: ASYNC220 - servers start before anything is measured
        args, env=env, cwd=tree, stdout=log, stderr=subprocess.STDOUT)
    server = Server(process, port, log)
    path = "/readyz" if kind == "coordinator" else "/healthz"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{kind} exited with {process.returncode}")
            try:
                conn = await connect(port)
                status, _ = await conn.request(build("GET", path), timeout=2)
                conn.close()
                if status == 200:
                    return server
            except (ConnectionError, OSError, TimeoutError):
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{kind} on port {port} not ready")
    except BaseException:
        log.seek(0)
        print(log.read().decode(errors="replace")[-3000:], file=sys.stderr)
        server.stop()
        raise
    finally:
        if hosts is not None:
            os.unlink(hosts_file.name)


@contextlib.asynccontextmanager
async def server_pair(kind: str, env: dict[str, str], hosts: dict[str, str] | None = None,
                      checkout: Build = Build()) -> AsyncIterator[tuple[Server, Server]]:
    """Two ``start_server(kind, env, hosts, checkout)`` processes, both stopped on the way out."""
    first = await start_server(kind, env, hosts, checkout)
    try:
        second = await start_server(kind, env, hosts, checkout)
    except BaseException:
        first.stop()
        raise
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


async def delete_prefix(redis: Redis, prefix: str) -> int:
    """Delete the keys of one bench prefix: every name keys.py builds, then anything else still
    under the prefix (a key added to keys.py later must not leak). Never FLUSHDB: Redis is shared."""
    deleted = int(await redis.unlink(*Keys(prefix).fixed()))
    async for key in redis.scan_iter(match=glob_escape(prefix) + ":*", count=1000):
        deleted += int(await redis.unlink(key))
    return deleted
