"""Opening Redis: a real server from REDIS_URL, or an embedded in-memory one (fakeredis + Lua)."""

from __future__ import annotations

from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis

from coordinator.settings import Settings


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


def open_redis(settings: Settings) -> tuple[Redis, str]:
    """A client and a description for the first log line."""
    if settings.redis_url is None:
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()), "embedded in-memory Redis (fakeredis)"
    url = settings.redis_url.get_secret_value()
    options: dict[str, object] = {
        # A fixed, small pool: long-polls never hold a connection while they wait, and a burst of
        # requests queues for a connection instead of failing as the default pool would.
        "max_connections": settings.redis_max_connections,
        "timeout": 10,
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
        "health_check_interval": 15,
    }
    if url.startswith("rediss://") and settings.redis_tls_insecure:
        options["ssl_cert_reqs"] = "none"
        options["ssl_check_hostname"] = False
    pool = BlockingConnectionPool.from_url(url, **options)
    return Redis(connection_pool=pool), describe_url(url)
