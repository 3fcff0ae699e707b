"""What ``serve`` checks before it serves: that the Redis of ``REDIS_URL`` answers, and that the
key prefix suits it. Each problem is one log line naming the setting, then the process exits,
rather than a traceback at start or a failure in every request afterwards. And what it warns
about (a missing or short admin token): once, not once per worker."""

from __future__ import annotations

import logging

import redis
from uvicorn.config import STARTUP_FAILURE

from coordinator.settings import Settings
from coordinator.state.keys import hash_tag
from coordinator.transport.open import cluster_enabled, describe_url, tls_options

# The exit status of a setting refused (as for a setting that does not parse): restarting the
# process cannot help. Redis not answering keeps uvicorn's STARTUP_FAILURE: a restart may.
BAD_CONFIGURATION = 2


class Refused(Exception):
    """The process must not serve: ``str()`` is the line to log (never a secret)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check_key_prefix(prefix: str, *, cluster: bool) -> None:
    """Refuse a prefix without a hash tag on a Redis Cluster: its keys would fall in different
    slots, and every script (which touches several) would fail with CROSSSLOT."""
    if cluster and hash_tag(prefix) is None:
        variable = Settings.variable("key_prefix")
        raise Refused(f"{variable}={prefix!r} has no hash tag, and REDIS_URL is a Redis Cluster: "
                      f"put a {{tag}} in it (as the default tether:{{default}} does) so that every "
                      f"key of the deployment is in one slot", BAD_CONFIGURATION)


ADMIN_TOKEN_MIN_CHARS = 32


def warn_about_settings(settings: Settings, log: logging.Logger) -> None:
    """Settings that work but should not: one line each, once per ``serve`` (before any worker is
    forked, so not once per worker)."""
    if settings.admin_token is None:
        log.warning("COORDINATOR_ADMIN_TOKEN is not set: the operator API refuses every call")
    elif len(settings.admin_token.get_secret_value()) < ADMIN_TOKEN_MIN_CHARS:
        log.warning("COORDINATOR_ADMIN_TOKEN is shorter than %d characters: easy to guess", ADMIN_TOKEN_MIN_CHARS)


def check_redis(settings: Settings) -> None:
    """Ask the Redis of ``REDIS_URL`` once, synchronously (before any worker is forked), whether
    it is a cluster node, and check the prefix against the answer. Nothing to ask of the embedded
    Redis."""
    if settings.redis_url is None:
        return
    url = settings.redis_url.get_secret_value()
    try:
        cluster = cluster_enabled(url, tls_options(url, settings))
    except (redis.RedisError, OSError) as exc:
        # redis-py's messages name the host and port, never the password.
        raise Refused(f"cannot use Redis at {describe_url(url)} (REDIS_URL): "
                      f"{type(exc).__name__}: {' '.join(str(exc).split())}", STARTUP_FAILURE) from None
    check_key_prefix(settings.key_prefix, cluster=cluster)
