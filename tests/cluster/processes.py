"""The six ``redis-server`` children of a local cluster: spawn them, join them with
``redis-cli --cluster create``, wait until the cluster is fully healthy, and stop them."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from tests.cluster.nodes import (
    HOST,
    MASTERS,
    NODES,
    REPLICAS_PER_MASTER,
    SLOTS,
    cluster_available,
    cluster_info,
    node,
    slot_ranges,
    wait_for,
)


class ClusterProcesses:
    """Six ``redis-server`` children forming a 3-master, 3-replica cluster on 127.0.0.1.

    Ports are ``base_port .. base_port+5`` (bus ports +10000). Use ``free_port_block`` to
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
            wait_for(self._unanswered, left(), "redis-server nodes answering PING")
            # 2. join them: assigns slots, pairs replicas with masters and meets the nodes
            self._create()
            # 3. wait until the cluster is usable from every node's point of view
            wait_for(self._unhealthy, left(), "cluster healthy")
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
                with node(port) as client:
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
                with node(port) as client:
                    info = cluster_info(client)
                    if info.get("cluster_state") != "ok":
                        return f"{port}: cluster_state={info.get('cluster_state')}"
                    for field in ("cluster_slots_assigned", "cluster_slots_ok"):
                        if info.get(field) != str(SLOTS):
                            return f"{port}: {field}={info.get(field)}"
                    if info.get("cluster_known_nodes") != str(len(self.ports)):
                        return f"{port}: cluster_known_nodes={info.get('cluster_known_nodes')}"
                    ranges = slot_ranges(client)
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
