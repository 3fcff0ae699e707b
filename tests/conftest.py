"""Shared fixtures: Redis backends (real, embedded, and a real local Redis Cluster), per-test key
prefixes, app clients.

Every test that takes ``redis_client`` runs on real Redis and on fakeredis; a module marked
``pytest.mark.cluster`` runs on a real local cluster of 3 masters and 3 replicas as well, started
once per session (the cluster is the slowest backend, so only the protocol, expiry and layout
suites opt in)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import fakeredis
import httpx
import pytest
import redis.asyncio as aioredis

from coordinator.app import create_app
from coordinator.settings import Settings
from coordinator.state.keys import Keys
from coordinator.state.store import Store
from coordinator.transport.base import (
    AutoPipelinedTransport,
    PlainTransport,
    RedisTransport,
)
from coordinator.transport.cluster import ClusterTransport
from coordinator.transport.open import open_cluster
from tests.cluster import LocalCluster, cluster_available, free_port_block
from tests.coordinator.response_shapes import check_response
from tests.support import (
    ADMIN,
    HOSTS,
    REAL_REDIS_URL,
    Process,
    agent_process,
    delete_prefix_async,
    unique_prefix,
)

# ADMIN, HOSTS and unique_prefix live in tests/support.py; tests may still import them from here.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


BACKENDS = ("redis", "fakeredis")
CLUSTER = "cluster"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses ``redis_client`` runs on each backend; on the cluster too only in
    modules marked ``cluster``. Generated here rather than collected and then deselected, so the
    README's test command reports no "deselected" that a newcomer would take for a failure. A
    test that names its backends itself (``parametrize("redis_client", ..., indirect=True)``)
    keeps them."""
    if "redis_client" not in metafunc.fixturenames:
        return
    if any(marker.args and "redis_client" in str(marker.args[0])
           for marker in metafunc.definition.iter_markers("parametrize")):
        return
    cluster = metafunc.definition.get_closest_marker("cluster") is not None
    metafunc.parametrize("redis_client", [*BACKENDS, *([CLUSTER] if cluster else [])], indirect=True)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """A real Redis Cluster (3 masters, 3 replicas) on loopback ports of its own, for the session."""
    if not cluster_available():
        pytest.skip("redis-server with cluster support is not installed")
    cluster = LocalCluster(free_port_block(6))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def redis_client(request: pytest.FixtureRequest) -> AsyncIterator[aioredis.Redis]:
    """A client of real Redis (the reference for Lua semantics), of the embedded fakeredis, or of
    a real local Redis Cluster (through the coordinator's own cluster client)."""
    if request.param == "redis":
        client = aioredis.Redis.from_url(REAL_REDIS_URL)
    elif request.param == CLUSTER:
        client = open_cluster(request.getfixturevalue("local_cluster").url, max_connections=64)
    else:
        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    yield client
    await client.aclose()


def transport_for(kind: str, client: Any) -> RedisTransport:
    """The transport ``open_redis`` would choose for this backend ("redis", "fakeredis",
    "cluster"), around ``client``."""
    if kind == "redis":
        return AutoPipelinedTransport(client)
    if kind == "cluster":
        return ClusterTransport(client)
    return PlainTransport(client)


def backend_of(request: pytest.FixtureRequest) -> str:
    """The ``redis_client`` parameter the test runs with."""
    return request.node.callspec.params["redis_client"]


@pytest.fixture
async def transport(request: pytest.FixtureRequest, redis_client: aioredis.Redis) -> AsyncIterator[RedisTransport]:
    """The test's backend behind the transport the coordinator would use (sharing its client)."""
    transport = transport_for(backend_of(request), Unclosable(redis_client))
    yield transport
    await transport.aclose()  # its own connections; the shared client stays open


@pytest.fixture
def prefix() -> str:
    return unique_prefix()


def make_settings(prefix: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "key_prefix": prefix,
        "admin_token": ADMIN,
        "static_hosts": HOSTS,
        "lease_ttl_s": 30,
        "host_offline_after_s": 30,
        "claim_wait_default_s": 0,
        "claim_wait_max_s": 10,
        "reaper_interval_s": 3600,  # tests sweep explicitly unless they say otherwise
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
async def store(redis_client: aioredis.Redis, transport: RedisTransport, prefix: str) -> AsyncIterator[Store]:
    s = Store(transport, Keys(prefix), host_offline_after_ms=30_000)
    await s.load_scripts()
    yield s
    await delete_prefix_async(redis_client, prefix)


class Api:
    """An in-process coordinator and helpers speaking its HTTP API."""

    def __init__(self, client: httpx.AsyncClient, app: Any) -> None:
        self.client = client
        self.app = app
        self.ctx = app.state.ctx

    @staticmethod
    def host_headers(host: str) -> dict[str, str]:
        return {"authorization": f"Bearer {HOSTS[host]}"}

    admin_headers: ClassVar[dict[str, str]] = {"authorization": f"Bearer {ADMIN}"}

    async def heartbeat(self, host: str, devices: list[dict[str, Any]] | list[str],
                        agent: dict[str, Any] | None = None) -> httpx.Response:
        body = [
            d if isinstance(d, dict) else {"device_id": d, "driver": "sim", "status": "available"}
            for d in devices
        ]
        payload: dict[str, Any] = {"devices": body}
        if agent is not None:
            payload["agent"] = agent
        return await self.client.put(
            f"/internal/v1/hosts/{host}/heartbeat", json=payload, headers=self.host_headers(host)
        )

    async def create_task(self, **body: Any) -> httpx.Response:
        body.setdefault("kind", "goal")
        if body["kind"] == "goal":
            body.setdefault("goal", "Turn on airplane mode")
        return await self.client.post("/api/v1/tasks", json=body, headers=self.admin_headers)

    async def task(self, task_id: str) -> dict[str, Any]:
        response = await self.client.get(f"/api/v1/tasks/{task_id}", headers=self.admin_headers)
        assert response.status_code == 200, response.text
        return response.json()

    async def claim(self, host: str, wait_s: float = 0, claim_id: str | None = None) -> httpx.Response:
        body = {"claim_id": claim_id} if claim_id else None
        return await self.client.post(
            f"/internal/v1/hosts/{host}/claim?wait_s={wait_s}", json=body, headers=self.host_headers(host)
        )

    async def renew(self, host: str, assignment: dict[str, Any], **extra: Any) -> httpx.Response:
        body = {"task_id": assignment["task_id"], "attempt": assignment["attempt"], **extra}
        return await self.client.post(
            f"/internal/v1/hosts/{host}/leases/{assignment['lease_id']}/renew",
            json=body,
            headers=self.host_headers(host),
        )

    async def result(self, host: str, assignment: dict[str, Any], status: str = "succeeded",
                     **extra: Any) -> httpx.Response:
        body = {
            "task_id": assignment["task_id"],
            "attempt": assignment["attempt"],
            "lease_id": assignment["lease_id"],
            "status": status,
            "failure_reason": None,
            "metadata": {"steps": 3},
            **extra,
        }
        return await self.client.post(
            f"/internal/v1/hosts/{host}/results", json=body, headers=self.host_headers(host)
        )

    async def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """An operator API call: ``await api.admin("POST", "/api/v1/hosts/h/drain")``."""
        return await self.client.request(method, path, headers=self.admin_headers, **kwargs)

    async def events(self, task_id: str) -> list[dict[str, Any]]:
        response = await self.admin("GET", f"/api/v1/tasks/{task_id}/events")
        assert response.status_code == 200, response.text
        return response.json()["events"]

    async def sweep(self) -> dict[str, int]:
        """One reaper sweep: how many leases, hosts, claims, queued tasks and purges it acted on."""
        from coordinator.reaper import sweep

        return await sweep(self.ctx.store, self.ctx.artifacts)


@pytest.fixture
def api_factory(request: pytest.FixtureRequest, redis_client: aioredis.Redis) -> Callable[..., Any]:
    """Build an in-process coordinator on the test's Redis backend with settings overrides."""
    prefixes: list[str] = []

    @contextlib.asynccontextmanager
    async def factory(**overrides: Any) -> AsyncIterator[Api]:
        prefix = overrides.pop("prefix", None) or unique_prefix()
        clock = overrides.pop("clock", None)  # a coordinator.clock.ShiftedClock the scripts read
        prefixes.append(prefix)
        # On real Redis the app gets a client of its own, as in production (and so auto-pipelines);
        # fakeredis and the cluster share the test's client, whose data they must see.
        kind = backend_of(request)
        client = aioredis.Redis.from_url(REAL_REDIS_URL) if kind == "redis" else Unclosable(redis_client)
        app = create_app(make_settings(prefix, **overrides), redis=transport_for(kind, client), clock=clock)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            # Every JSON answer is checked against its route's shape (tests/coordinator/response_shapes.py).
            async with httpx.AsyncClient(transport=transport, base_url="http://coordinator",
                                         event_hooks={"response": [check_response]}) as client:
                yield Api(client, app)
        await delete_prefix_async(redis_client, prefix)

    return factory


@pytest.fixture
async def api(api_factory: Callable[..., Any]) -> AsyncIterator[Api]:
    async with api_factory() as a:
        yield a


class Unclosable:
    """The shared test client, protected from the app's lifespan closing it."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def aclose(self) -> None:
        return None



@pytest.fixture
def start_agent(tmp_path: Path, agent_url: str) -> Iterator[Callable[..., Process]]:
    """``start_agent(name="agent", HOST_ID=..., ...)``: ``python -m agent`` against ``agent_url``
    (a suite's fixture: the coordinator's URL, or a recording proxy's before it), in
    ``tmp_path/<name>``, with FAST_AGENT's timings and a grace of 10 s; each stopped at the end."""
    agents: list[Process] = []

    def start(name: str = "agent", **settings: str) -> Process:
        agents.append(agent_process(agent_url, tmp_path / name, name, **{"SHUTDOWN_GRACE_S": "10", **settings}))
        return agents[-1]

    yield start
    for agent in agents:
        agent.stop()
