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

Where things are: ``nodes.py`` whether Redis can run a cluster here, free ports, and the
short-lived admin clients and polls every wait uses; ``processes.py`` starting, checking and
stopping the six children; ``faults.py`` ``LocalCluster`` itself, which adds who masters a key,
killing it, waiting for the failover and restarting the killed node.

``python -m tests.cluster`` is a smoke test (``--failover`` also kills a master and waits for
the replica to take over). Only the stdlib and redis-py's sync client are used here.
"""
from __future__ import annotations

from tests.cluster.faults import LocalCluster
from tests.cluster.nodes import (
    HOST,
    MASTERS,
    NODES,
    REPLICAS_PER_MASTER,
    SLOTS,
    cluster_available,
    free_port_block,
)

__all__ = [
    "HOST",
    "MASTERS",
    "NODES",
    "REPLICAS_PER_MASTER",
    "SLOTS",
    "LocalCluster",
    "cluster_available",
    "free_port_block",
]
