"""Opening Redis: a real server from REDIS_URL (a single node, or any node of a Redis Cluster,
found out by asking it), or an embedded in-memory one (fakeredis + Lua), each behind its
transport (``base.py``)."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.maint_notifications import MaintNotificationsConfig

from coordinator.settings import Settings
from coordinator.transport.base import (
    AutoPipelinedTransport,
    OnceMore,
    PlainTransport,
    RedisTransport,
)
from coordinator.transport.cluster import BoundedRedisCluster, ClusterTransport

# Socket timeouts: above the longest blocking call we make (the inbox's BLMPOP and the feed's
# XREAD wait 1 s; WAIT at most 5 s), so a quiet blocking read never looks like a dead connection.
SOCKET_TIMEOUT_S = 10
# A connect to a Redis that is near takes milliseconds; 2 s still lets the kernel send its SYN
# again (after 1 s) when the first is lost. It bounds how long a connect to a Redis that drops
# packets (a host or container going away) holds a request before its 503, and a loop's attempt
# before its next one: an attempt caught in one when Redis comes back delays that loop by it.
CONNECT_TIMEOUT_S = 2


def describe_url(url: str) -> str:
    """The URL without credentials, fit for a log line: user and password are masked, and the
    query (which may carry ``password=``) is dropped."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    if parts.password is not None or parts.username is not None:
        host = "***@" + host
    return f"{parts.scheme}://{host}{parts.path}"


def tls_options(url: str, settings: Settings) -> dict[str, Any]:
    if url.startswith("rediss://") and settings.redis_tls_insecure:
        return {"ssl_cert_reqs": "none", "ssl_check_hostname": False}
    return {}


def cluster_enabled(url: str, tls: dict[str, Any]) -> bool:
    """Whether the node at ``url`` runs in cluster mode (``INFO cluster``, answered by every
    Redis; ``CLUSTER INFO`` is an error on a single node). Raises what redis-py raises when the
    node cannot be asked (down, wrong password)."""
    client = redis.Redis.from_url(url, socket_timeout=CONNECT_TIMEOUT_S,
                                  socket_connect_timeout=CONNECT_TIMEOUT_S, **tls)
    try:
        return client.info("cluster").get("cluster_enabled") == 1
    finally:
        client.close()


def is_cluster(url: str, tls: dict[str, Any]) -> bool:
    """``cluster_enabled``, asked once per process at start. A node that cannot be asked counts
    as a single node: the start-up's first command then fails with the real reason."""
    try:
        return cluster_enabled(url, tls)
    except (redis.RedisError, OSError):
        return False


def open_redis(settings: Settings) -> tuple[RedisTransport, str]:
    """The transport this process reaches Redis through, chosen once by what the URL names (none:
    the embedded Redis), and a description for the first log line."""
    if settings.redis_url is None:
        import fakeredis

        embedded = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        return PlainTransport(embedded), "embedded in-memory Redis (fakeredis)"
    url = settings.redis_url.get_secret_value()
    tls = tls_options(url, settings)
    if is_cluster(url, tls):
        cluster = open_cluster(url, settings.redis_max_connections, tls)
        return ClusterTransport(cluster), "Redis Cluster via " + describe_url(url)
    # A fixed, small pool: long-polls never hold a connection while they wait, and a burst of
    # requests queues for a connection instead of failing as the default pool would.
    pool = BlockingConnectionPool.from_url(
        url, max_connections=settings.redis_max_connections, timeout=10, socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S, health_check_interval=15, retry=OnceMore(),
        # Maintenance notifications (Redis Enterprise's push messages, RESP3) off: with them on,
        # which redis-py 8.1 makes the default, the pool no longer looks at a connection before
        # handing it out, so one the server closed while it sat idle (a restarted Redis) fails
        # the call it is given to with a 503; off, the look (at what the event loop has already
        # read, no round trip) replaces it first. It also spares a CLIENT MAINT_NOTIFICATIONS
        # that Redis refuses on every connect.
        maint_notifications_config=MaintNotificationsConfig(enabled=False), **tls,
    )
    client = Redis(connection_pool=pool)
    if settings.autopipeline:
        return AutoPipelinedTransport(client), describe_url(url)
    return PlainTransport(client), describe_url(url) + " (not auto-pipelined)"


def open_cluster(url: str, max_connections: int, tls: dict[str, Any] | None = None) -> BoundedRedisCluster:
    """The cluster client, from any node's URL: it learns the slot map from that node, follows
    MOVED and failovers by itself, and holds at most ``max_connections`` per node."""
    client = BoundedRedisCluster.from_url(
        url, max_connections=max_connections, socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S, **(tls or {}),
    )
    return cast(BoundedRedisCluster, client)  # from_url builds cls; redis-py types it RedisCluster
