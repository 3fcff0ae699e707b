"""What a benchmark run hands every scenario: its size (a ``Preset``) and the ``Bench``: Redis,
the admin token, key prefixes of its own and the environment of the server processes."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

from redis.asyncio import Redis

from bench.floor_lifecycle import LifecycleScripts
from bench.peers import Figures
from bench.procs import Build, delete_prefix


@dataclass(frozen=True)
class Preset:
    name: str
    concurrency: int  # wrk connections of the floor and of each hot call (the same for both)
    warmup_s: float
    rounds: int  # floor and call windows, alternated: this VM's speed drifts by 10-20 %
    throughput_s: float  # one measured window of the floor or a call
    lifecycle_hosts: int
    lifecycle_s: float
    dispatch_probes: int  # idle dispatch samples
    polls: int  # concurrent waiting polls on one process
    poll_probes: int
    heartbeat_hosts: int
    heartbeat_window_s: float
    cost_hosts: int  # the large fleet of the cost-growth scenario (the small one is 10)
    cost_tasks: int  # waiting tasks of the large case (the small one is 100)
    cost_samples: int


PRESETS = {
    "small": Preset("small", concurrency=64, warmup_s=1, rounds=2, throughput_s=4, lifecycle_hosts=128,
                    lifecycle_s=10, dispatch_probes=300, polls=1_000, poll_probes=100,
                    heartbeat_hosts=1_000, heartbeat_window_s=15, cost_hosts=1_000,
                    cost_tasks=10_000, cost_samples=200),
    "full": Preset("full", concurrency=64, warmup_s=2, rounds=4, throughput_s=6, lifecycle_hosts=256,
                   lifecycle_s=30, dispatch_probes=500, polls=10_000, poll_probes=300,
                   heartbeat_hosts=10_000, heartbeat_window_s=30, cost_hosts=10_000,
                   cost_tasks=100_000, cost_samples=500),
}


def server_env(redis_url: str, prefix: str, admin: str, **settings: str) -> dict[str, str]:
    """The environment of a bench server process: this one's, less any coordinator setting, plus
    the run's Redis, key prefix and admin token, and ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    env.update({
        "REDIS_URL": redis_url,
        "COORDINATOR_KEY_PREFIX": prefix,
        "COORDINATOR_ADMIN_TOKEN": admin,
        # Hosts stay online without background heartbeats, so only the scenario's own load
        # runs; the heartbeat scenario uses the default threshold.
        "COORDINATOR_HOST_OFFLINE_AFTER_S": "3600",
    })
    env.update(settings)
    return env


@dataclass
class Bench:
    """What every scenario shares: the preset, Redis, and the prefixes to clean up."""

    preset: Preset
    redis_url: str
    redis: Redis
    redis_pid: int
    redis_port: int
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    admin: str = field(default_factory=lambda: "bench-admin-" + uuid.uuid4().hex)
    # The HTTP floor's requests/s, once the calls scenario has measured it in this run: other
    # scenarios state their targets as ratios to it.
    floor_rate: float | None = None
    # saq's figures, once the lifecycle scenario has measured them in this run (when installed).
    saq: Figures | None = None
    # The lifecycle floor's scripts and Tether's, driven alike, once a scenario has measured them.
    lifecycle_scripts: LifecycleScripts | None = None
    # The coordinator measured: this checkout, or another commit's (bench/ab.py).
    build: Build = field(default_factory=Build)

    def prefix(self, name: str) -> str:
        return f"bench-{self.run_id}-{name}:{{b}}"

    def env(self, prefix: str, **settings: str) -> dict[str, str]:
        return server_env(self.redis_url, prefix, self.admin, **settings)

    async def cleanup(self, prefix: str) -> None:
        await delete_prefix(self.redis, prefix)
