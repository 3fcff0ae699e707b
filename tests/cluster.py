"""A real local Redis Cluster for tests: 3 masters + 3 replicas on 127.0.0.1.

``LocalCluster(free_port_block(6)).start()`` runs six ``redis-server --cluster-enabled yes``
children (no persistence, data in a temporary folder of their own), joins them with
``redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`` and returns only once every
node says ``cluster_state:ok``, sees all 16384 slots covered by three masters that each have a
replica, and every replica's link to its master is up. ``stop()`` terminates the children,
waits for them and removes the folder.

For fault tests, ``kill_master_of(key)`` SIGKILLs the master serving a key's slot and
``wait_failover(key, deadline_s)`` waits until a replica has taken over that slot.

There are no fixed sleeps: every wait polls a condition until a deadline, then raises with what
it last saw (and the tail of the server logs when a node failed to come up).

``python -m tests.cluster`` is a smoke test (``--failover`` also kills a master and waits for
the replica to take over). Only the stdlib and redis-py's sync client are used here.
"""

from __future__ import annotations

import argparse
import functools
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

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
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
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


def _wait_for(check: Callable[[], str | None], deadline_s: float, what: str) -> None:
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
def _node(port: int) -> Iterator[redis.Redis]:
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


def _cluster_info(client: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` as a dict of strings (raw, so no redis-py parsing is relied on)."""
    # Sent as two words, redis-py applies no response callback: the reply is the raw text.
    text: str = client.execute_command("CLUSTER", "INFO")
    return dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line)


def _slot_ranges(client: redis.Redis) -> list[tuple[int, int, int, list[int]]]:
    """``CLUSTER SLOTS`` as (first slot, last slot, master port, replica ports) tuples.

    CLUSTER SLOTS (deprecated in 7.0 but still served) is used rather than CLUSTER SHARDS
    because it exists on every Redis this helper accepts (>= 5.0) and its reply is a plain list.
    """
    ranges = []
    for entry in client.execute_command("CLUSTER", "SLOTS"):
        first, last, master, *replicas = entry
        ranges.append((int(first), int(last), int(master[1]), [int(r[1]) for r in replicas]))
    return ranges


# -- the cluster --------------------------------------------------------------------------------


class LocalCluster:
    """Six ``redis-server`` children forming a 3-master, 3-replica cluster on 127.0.0.1.

    Ports are ``base_port .. base_port+5`` (bus ports +10000). Use :func:`free_port_block` to
    choose ``base_port``. Also a context manager: ``with LocalCluster(...) as cluster:``.
    """

    def __init__(self, base_port: int, node_timeout_ms: int = 1000) -> None:
        self.base_port = base_port
        self.node_timeout_ms = node_timeout_ms
        self.ports: list[int] = list(range(base_port, base_port + NODES))
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._killed: set[int] = set()
        self._dir: Path | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """URL of the first node; any node is enough for a cluster client to discover the rest."""
        return f"redis://{HOST}:{self.ports[0]}/0"

    @property
    def running(self) -> bool:
        return bool(self._procs)

    @property
    def live_ports(self) -> list[int]:
        """Ports of the nodes not killed by :meth:`kill_master_of`."""
        return [port for port in self.ports if port not in self._killed]

    def start(self, deadline_s: float = 60.0) -> None:
        """Start the nodes, create the cluster and wait until it is fully healthy.

        Calling it on a running cluster does nothing. On failure every child is stopped and
        a RuntimeError says what went wrong, with the tail of the logs of the nodes involved.
        """
        if self._procs:
            return
        if not cluster_available():
            raise RuntimeError("redis-server/redis-cli (>= 5.0) with cluster support not found")
        self._dir = Path(tempfile.mkdtemp(prefix=f"tether-cluster-{self.base_port}-"))
        self._killed.clear()
        deadline = time.monotonic() + deadline_s

        def left() -> float:
            return max(deadline - time.monotonic(), 1.0)

        try:
            for port in self.ports:
                self._spawn(port)
            # 1. every node answers PING (fails at once if a node exited, e.g. its port was taken)
            _wait_for(self._unanswered, left(), "redis-server nodes answering PING")
            # 2. join them: assigns slots, pairs replicas with masters and meets the nodes
            self._create()
            # 3. wait until the cluster is usable from every node's point of view
            _wait_for(self._unhealthy, left(), "cluster healthy")
        except Exception as exc:
            logs = self._log_tails()
            self.stop()
            raise RuntimeError(f"local Redis Cluster on ports {self.ports} failed: {exc}\n{logs}") from exc
        except BaseException:  # KeyboardInterrupt and the like: no children left behind
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM every node, wait (SIGKILL after 10 s), remove the data folder. Idempotent."""
        procs, self._procs = self._procs, {}
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _spawn(self, port: int) -> None:
        assert self._dir is not None
        # The log file handle is only needed by the child: close our copy right away.
        with open(self._dir / f"redis-{port}.log", "wb") as log:
            self._procs[port] = subprocess.Popen(
                [
                    "redis-server",
                    "--bind", HOST,
                    "--port", str(port),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", f"nodes-{port}.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--save", "",
                    "--appendonly", "no",
                    "--daemonize", "no",
                    "--dir", str(self._dir),
                    # Replicas full-sync right away instead of after the default 5 s grace
                    # period that diskless sync waits for more replicas to join (saves ~5 s).
                    "--repl-diskless-sync-delay", "0",
                    # Redis 7 leaves a replica out of CLUSTER SLOTS/SHARDS until its replication
                    # offset is non-zero, which an idle master only bumps with its replica
                    # PING, every 10 s by default: 1 s makes the cluster complete ~8 s sooner.
                    "--repl-ping-replica-period", "1",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
            )

    def _check_alive(self) -> None:
        """Raise at once if a node exited (port taken, bad option...) rather than time out."""
        for port, proc in self._procs.items():
            if port not in self._killed and proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {port} exited with code {proc.returncode}")

    def _unanswered(self) -> str | None:
        self._check_alive()
        silent = []
        for port in self.ports:
            try:
                with _node(port) as client:
                    client.ping()
            except redis.RedisError:
                silent.append(port)
        return f"no PING reply from {silent}" if silent else None

    def _create(self) -> None:
        command = [
            "redis-cli", "--cluster", "create",
            *(f"{HOST}:{port}" for port in self.ports),
            "--cluster-replicas", str(REPLICAS_PER_MASTER),
            "--cluster-yes",
        ]
        result = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0 or "[OK] All 16384 slots covered" not in result.stdout:
            raise RuntimeError(
                f"redis-cli --cluster create exited {result.returncode}:\n"
                f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )

    def _unhealthy(self) -> str | None:
        """None once every node reports a fully healthy cluster, else what is still missing.

        Healthy means, on every node: cluster_state:ok, all slots assigned and ok, all six
        nodes known, CLUSTER SLOTS covering all 16384 slots with three masters that each list a
        replica; and on every replica: master_link_status:up.
        """
        self._check_alive()
        for port in self.live_ports:
            try:
                with _node(port) as client:
                    info = _cluster_info(client)
                    if info.get("cluster_state") != "ok":
                        return f"{port}: cluster_state={info.get('cluster_state')}"
                    for field in ("cluster_slots_assigned", "cluster_slots_ok"):
                        if info.get(field) != str(SLOTS):
                            return f"{port}: {field}={info.get(field)}"
                    if info.get("cluster_known_nodes") != str(len(self.ports)):
                        return f"{port}: cluster_known_nodes={info.get('cluster_known_nodes')}"
                    ranges = _slot_ranges(client)
                    if sum(last - first + 1 for first, last, _, _ in ranges) != SLOTS:
                        return f"{port}: CLUSTER SLOTS does not cover every slot"
                    if len({master for _, _, master, _ in ranges}) != MASTERS:
                        return f"{port}: CLUSTER SLOTS lists masters {sorted({m for _, _, m, _ in ranges})}"
                    if any(len(replicas) < REPLICAS_PER_MASTER for _, _, _, replicas in ranges):
                        return f"{port}: a slot range has no replica yet"
                    replication = client.info("replication")
                    if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                        return f"{port}: master_link_status={replication.get('master_link_status')}"
            except redis.RedisError as exc:
                return f"{port}: {exc!r}"
        return None

    def _log_tails(self, lines: int = 15) -> str:
        if self._dir is None:
            return ""
        parts = []
        for port in self.ports:
            path = self._dir / f"redis-{port}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- redis-{port}.log (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- topology and faults --------------------------------------------------------------------

    def slot_of(self, key: str) -> int:
        """The hash slot of ``key`` (asked of a live node: CLUSTER KEYSLOT)."""
        for port in self.live_ports:
            try:
                with _node(port) as client:
                    return int(client.execute_command("CLUSTER", "KEYSLOT", key))
            except redis.ConnectionError:
                continue
        raise RuntimeError("no live node answered CLUSTER KEYSLOT")

    def _master_seen_by(self, port: int, slot: int) -> int | None:
        """Port of the master of ``slot`` as node ``port`` sees it (None if unassigned)."""
        with _node(port) as client:
            for first, last, master, _ in _slot_ranges(client):
                if first <= slot <= last:
                    return master
        return None

    def master_of(self, key: str) -> int:
        """Port of the master serving ``key``'s slot, as the first live node that answers sees it."""
        slot = self.slot_of(key)
        for port in self.live_ports:
            try:
                master = self._master_seen_by(port, slot)
            except redis.ConnectionError:
                continue
            if master is None:
                raise RuntimeError(f"slot {slot} is not covered (seen from {port})")
            return master
        raise RuntimeError("no live node answered CLUSTER SLOTS")

    def kill_master_of(self, key: str) -> int:
        """SIGKILL the master of ``key``'s slot (no clean shutdown: a crash); return its port."""
        port = self.master_of(key)
        proc = self._procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait()  # reap it now: no zombie, and the port is released
        self._killed.add(port)
        return port

    def restart(self, port: int, deadline_s: float = 30.0) -> None:
        """Start a killed node again, as an operator restarts a crashed server: it keeps its
        nodes-P.conf, so it rejoins as a replica of the node that took over its slots. Returns
        once its link to that master is up and the cluster is fully healthy again."""
        assert port in self._killed, f"{port} was not killed"
        self._spawn(port)
        self._killed.discard(port)
        _wait_for(self._unhealthy, deadline_s, f"node {port} back as a replica")

    def wait_failover(self, key: str, deadline_s: float) -> int:
        """Wait until a node other than the killed one(s) masters ``key``'s slot; return its port.

        Done when every surviving node reports cluster_state:ok and names the same, live master
        for the slot, and that master itself says role:master. Raises TimeoutError at the deadline.
        """
        slot = self.slot_of(key)
        new_master: list[int] = []

        def pending() -> str | None:
            self._check_alive()
            seen: dict[int, int | None] = {}
            for port in self.live_ports:
                try:
                    with _node(port) as client:
                        state = _cluster_info(client).get("cluster_state")
                    if state != "ok":
                        return f"{port}: cluster_state={state}"
                    seen[port] = self._master_seen_by(port, slot)
                except redis.RedisError as exc:
                    return f"{port}: {exc!r}"
            masters = set(seen.values())
            if len(masters) != 1:
                return f"nodes disagree on the master of slot {slot}: {seen}"
            (master,) = masters
            if master is None or master in self._killed:
                return f"slot {slot} still mastered by {master}"
            with _node(master) as client:
                role = client.info("replication").get("role")
            if role != "master":
                return f"{master}: role={role}"
            new_master[:] = [master]
            return None

        _wait_for(pending, deadline_s, f"failover of slot {slot} ({key!r})")
        return new_master[0]


# -- smoke test ---------------------------------------------------------------------------------


def _smoke(failover: bool) -> None:
    from redis.cluster import RedisCluster

    cluster = LocalCluster(free_port_block(NODES))
    started = time.monotonic()
    cluster.start()
    try:
        print(f"cluster up in {time.monotonic() - started:.2f}s: {cluster.url}")
        client = RedisCluster.from_url(cluster.url, decode_responses=True)
        try:
            keys = [f"smoke:{i}" for i in range(20)]
            for key in keys:
                client.set(key, key)
            assert all(client.get(key) == key for key in keys)
            masters = {cluster.master_of(key) for key in keys}
            print(f"20 keys written and read back; they live on masters {sorted(masters)}")
            assert len(masters) == MASTERS, masters
            if failover:
                key = "tether:{t1}:tasks"
                killed = cluster.kill_master_of(key)
                started = time.monotonic()
                promoted = cluster.wait_failover(key, deadline_s=30)
                print(f"killed {killed}; {promoted} took over in {time.monotonic() - started:.2f}s")
        finally:
            client.close()
    finally:
        cluster.stop()
    print("stopped; OK")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Start, check and stop a local Redis Cluster.")
    parser.add_argument("--failover", action="store_true", help="also kill a master and wait for failover")
    args = parser.parse_args()
    if not cluster_available():
        raise SystemExit("redis-server/redis-cli with cluster support not available")
    _smoke(args.failover)
