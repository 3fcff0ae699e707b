"""``LocalCluster``: the local cluster's processes plus what fault tests ask of them: which
master serves a key, SIGKILL it, wait until a replica has taken over, restart the killed node."""

from __future__ import annotations

import signal

import redis

from tests.cluster.nodes import cluster_info, node, slot_ranges, wait_for
from tests.cluster.processes import ClusterProcesses


class LocalCluster(ClusterProcesses):
    """A 3-master, 3-replica cluster on 127.0.0.1 (see ``ClusterProcesses``) that fault tests
    can break and mend."""

    def slot_of(self, key: str) -> int:
        """The hash slot of ``key`` (asked of a live node: CLUSTER KEYSLOT)."""
        for port in self.live_ports:
            try:
                with node(port) as client:
                    return int(client.execute_command("CLUSTER", "KEYSLOT", key))
            except redis.ConnectionError:
                continue
        raise RuntimeError("no live node answered CLUSTER KEYSLOT")

    def _master_seen_by(self, port: int, slot: int) -> int | None:
        """Port of the master of ``slot`` as node ``port`` sees it (None if unassigned)."""
        with node(port) as client:
            for first, last, master, _ in slot_ranges(client):
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
        wait_for(self._unhealthy, deadline_s, f"node {port} back as a replica")

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
                    with node(port) as client:
                        state = cluster_info(client).get("cluster_state")
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
            with node(master) as client:
                role = client.info("replication").get("role")
            if role != "master":
                return f"{master}: role={role}"
            new_master[:] = [master]
            return None

        wait_for(pending, deadline_s, f"failover of slot {slot} ({key!r})")
        return new_master[0]
