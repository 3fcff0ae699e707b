"""What the local cluster is built from: its shape and ports, whether this machine can run it,
and the short-lived admin clients and deadline-bound polls that every wait uses."""

from __future__ import annotations

import functools
import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

HOST = "127.0.0.1"
SLOTS = 16384
# A node's cluster bus listens on its client port + 10000 (fixed by Redis).
BUS_PORT_OFFSET = 10000
MASTERS = 3
REPLICAS_PER_MASTER = 1
NODES = MASTERS * (1 + REPLICAS_PER_MASTER)
# How often the waits below look again.
_POLL_S = 0.05
# Per-command timeout of the helper's own (sync) admin connections.
_ADMIN_TIMEOUT_S = 1.0


# -- availability and ports ---------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def cluster_available() -> bool:
    """Whether ``redis-server`` and ``redis-cli`` are installed and new enough for this helper.

    Cluster mode exists since Redis 3, but ``redis-cli --cluster create`` (used to join the nodes)
    since 5.0, so 5.0 is the floor. Tests use it as ``pytest.mark.skipif(not cluster_available())``.
    """
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        return False
    try:
        out = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    match = re.search(r"v=(\d+)\.(\d+)", out)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (5, 0)


def _port_is_free(port: int) -> bool:
    """True if nothing is bound to ``port`` on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port_block(n: int) -> int:
    """A base port such that base..base+n-1 and their bus ports (+10000) are free on 127.0.0.1.

    Bases are drawn at random so parallel runs (several pytest workers, several checkouts) are
    unlikely to pick the same block; the block is free when asked, so start the cluster soon.
    Both the client ports and the bus ports stay below the kernel's ephemeral range, where
    outgoing connections would otherwise grab them at random.
    """
    ephemeral_low = 32768
    with suppress(OSError, ValueError, IndexError):
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    low = 11000
    high = min(ephemeral_low, 65536) - BUS_PORT_OFFSET - n  # highest base whose bus block fits
    if high <= low:
        low, high = 1024, 65535 - BUS_PORT_OFFSET - n
    rng = random.Random()  # not the global one: tests may seed that
    for _ in range(200):
        base = rng.randrange(low, high)
        ports = [*range(base, base + n), *range(base + BUS_PORT_OFFSET, base + BUS_PORT_OFFSET + n)]
        if all(_port_is_free(port) for port in ports):
            return base
    raise RuntimeError(f"no free block of {n} ports (plus bus ports) found on {HOST}")


# -- small helpers ------------------------------------------------------------------------------


def wait_for(check: Callable[[], str | None], deadline_s: float, what: str) -> None:
    """Poll ``check`` until it returns None (= done) or ``deadline_s`` seconds pass.

    ``check`` returns a short description of what is still missing; the last one goes into the
    error raised at the deadline, so a failure says *why* it was not ready.
    """
    deadline = time.monotonic() + deadline_s
    while True:
        missing = check()
        if missing is None:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not done after {deadline_s:.1f}s; last seen: {missing}")
        time.sleep(_POLL_S)


@contextmanager
def node(port: int) -> Iterator[redis.Redis]:
    """A short-lived sync admin client of one node (closed at the end of the block)."""
    client = redis.Redis(
        host=HOST,
        port=port,
        decode_responses=True,
        socket_timeout=_ADMIN_TIMEOUT_S,
        socket_connect_timeout=_ADMIN_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),  # one try: a dead node must not slow the polls down
    )
    try:
        yield client
    finally:
        client.close()


def cluster_info(client: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` as a dict of strings (raw, so no redis-py parsing is relied on)."""
    # Sent as two words, redis-py applies no response callback: the reply is the raw text.
    text: str = client.execute_command("CLUSTER", "INFO")
    return dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line)


def slot_ranges(client: redis.Redis) -> list[tuple[int, int, int, list[int]]]:
    """``CLUSTER SLOTS`` as (first slot, last slot, master port, replica ports) tuples.

    CLUSTER SLOTS (deprecated in 7.0 but still served) is used rather than CLUSTER SHARDS
    because it exists on every Redis this helper accepts (>= 5.0) and its reply is a plain list.
    """
    ranges = []
    for entry in client.execute_command("CLUSTER", "SLOTS"):
        first, last, master, *replicas = entry
        ranges.append((int(first), int(last), int(master[1]), [int(r[1]) for r in replicas]))
    return ranges
