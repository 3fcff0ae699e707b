"""``python -m tests.cluster [--failover]``: start a local cluster, write and read keys across
its three masters (optionally kill one and time the failover), stop it."""

from __future__ import annotations

import argparse
import time

from tests.cluster import (
    MASTERS,
    NODES,
    LocalCluster,
    cluster_available,
    free_port_block,
)


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
