"""The model-based test: hypothesis drives the store through random sequences of the protocol's
calls and clock steps across every deadline, and checks the contract's invariants after each
step (tests/coordinator/model.py, invariants.py), on real Redis, on fakeredis and on a local
Redis Cluster.

The CI profile explores a bounded number of sequences within about half a minute per backend.
A soak run explores many more: ``TETHER_MODEL_PROFILE=soak .venv/bin/python -m pytest -q
tests/coordinator/test_model.py`` (see docs/operations.md, "What Tether guarantees").
"""

from __future__ import annotations

import os
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from coordinator.transport.cluster import ClusterTransport
from coordinator.transport.open import open_cluster
from tests.coordinator.model import ProtocolMachine
from tests.support import REAL_REDIS_URL

PROFILES = {
    "ci": settings(max_examples=100, stateful_step_count=40, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]),
    "soak": settings(max_examples=5_000, stateful_step_count=100, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]),
}


@pytest.mark.parametrize("backend", ["redis", "fakeredis", "cluster"])
def test_every_sequence_of_calls_and_clock_steps_keeps_the_contract(backend: str, request: pytest.FixtureRequest) -> None:
    cluster_url = request.getfixturevalue("local_cluster").url if backend == "cluster" else ""

    class Machine(ProtocolMachine):
        @staticmethod
        def redis_factory() -> Any:
            if backend == "redis":
                return aioredis.Redis.from_url(REAL_REDIS_URL)
            if backend == "cluster":
                return open_cluster(cluster_url, max_connections=16)
            return fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())

    if backend == "cluster":
        Machine.transport_factory = ClusterTransport
    run_state_machine_as_test(Machine, settings=PROFILES[os.environ.get("TETHER_MODEL_PROFILE", "ci")])
