"""Small promises of configuration: whole-second intervals, warnings for weak settings, no
secret in what is logged, what is refused at start, and how an outage is logged."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis import exceptions as redis_errors

from coordinator.outage import RETRY_CAP_S, Backoff, OutageLog
from coordinator.serve.preflight import Refused, check_redis, warn_about_settings
from coordinator.state.keys import Keys, hash_tag
from coordinator.transport.open import describe_url, open_redis
from tests.cluster import LocalCluster
from tests.conftest import ADMIN, make_settings, unique_prefix
from tests.support import REAL_REDIS_URL, free_port

pytestmark = pytest.mark.anyio

HOST = "/internal/v1/hosts/host-a"


async def test_heartbeat_interval_is_a_whole_number_of_seconds(api_factory: Any) -> None:
    async with api_factory(heartbeat_interval_s=0.3) as api:
        answer = (await api.heartbeat("host-a", [])).json()
        assert answer["heartbeat_interval_s"] == 1 and answer["draining"] is False


def test_a_short_admin_token_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    # By serve, once, before it forks any worker (tests/e2e/test_workers.py: once with two workers).
    log = logging.getLogger("coordinator")
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        warn_about_settings(make_settings(unique_prefix(), admin_token="short"), log)
    warnings = [r.getMessage() for r in caplog.records if "COORDINATOR_ADMIN_TOKEN" in r.getMessage()]
    assert len(warnings) == 1 and "short" not in warnings[0].replace("shorter", "")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        warn_about_settings(make_settings(unique_prefix(), admin_token="x" * 32), log)
    assert not [r for r in caplog.records if "COORDINATOR_ADMIN_TOKEN" in r.getMessage()]


@pytest.mark.parametrize("url", [
    "redis://:hunter2-secret@127.0.0.1:6379/0",
    "redis://user:hunter2-secret@127.0.0.1:6379/0",
    "redis://127.0.0.1:6379/0?password=hunter2-secret",
    # Nothing listens on port 1: asked at start whether it is a cluster, it refuses at once (a TLS
    # handshake with the plain Redis on 6379 would wait out the connect timeout, then the same).
    "rediss://127.0.0.1:1/0?username=u&password=hunter2-secret",
])
async def test_the_redis_url_is_described_without_its_secret(url: str) -> None:
    assert "hunter2" not in describe_url(url)
    client, description = open_redis(make_settings(unique_prefix(), redis_url=url))
    assert "hunter2" not in description and "127.0.0.1" in description
    assert "hunter2" not in repr(make_settings(unique_prefix(), redis_url=url, admin_token=ADMIN))
    await client.aclose()


# -- refused at start --------------------------------------------------------------------------

PREFIXES = ["tether:{default}", "{t}", "a{b}c", "tether", "tether:{}", "tether:{open", "tether:}x{",
            "x}{y}"]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_prefix_has_a_hash_tag_exactly_when_the_cluster_puts_its_keys_in_one_slot(
        prefix: str, local_cluster: LocalCluster) -> None:
    slots = {local_cluster.slot_of(key) for key in Keys(prefix).fixed()}
    assert (hash_tag(prefix) is not None) == (len(slots) == 1), (hash_tag(prefix), slots)


def test_an_untagged_prefix_is_refused_on_a_cluster_only(local_cluster: LocalCluster) -> None:
    with pytest.raises(Refused) as refused:
        check_redis(make_settings("tether-untagged", redis_url=local_cluster.url))
    assert "COORDINATOR_KEY_PREFIX" in str(refused.value) and refused.value.exit_code == 2
    check_redis(make_settings("tether:{tagged}", redis_url=local_cluster.url))
    check_redis(make_settings("tether-untagged", redis_url=REAL_REDIS_URL))  # one node: one slot
    check_redis(make_settings("tether-untagged"))  # the embedded Redis


def test_an_unreachable_redis_is_refused_naming_its_url_without_the_password() -> None:
    port = free_port()
    with pytest.raises(Refused) as refused:
        check_redis(make_settings(unique_prefix(), redis_url=f"redis://u:hunter2-secret@127.0.0.1:{port}/0"))
    line = str(refused.value)
    assert "REDIS_URL" in line and f"127.0.0.1:{port}" in line and "hunter2" not in line
    assert refused.value.exit_code == 3 and "\n" not in line


# -- outages -----------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_one_line_as_it_begins_and_one_with_its_length_as_it_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    outage = OutageLog(logging.getLogger("tests.outage"), "sweeper", clock)
    with caplog.at_level(logging.INFO, logger="tests.outage"):
        outage.succeeded()  # no outage: nothing to say
        for _ in range(50):
            outage.failed(redis_errors.ConnectionError("Error 111 connecting to 127.0.0.1:1."))
            clock.now += 0.1
        outage.failed(redis_errors.TimeoutError("Timeout reading from socket"))
        outage.succeeded()
        outage.succeeded()
    lines = [(r.levelno, r.getMessage(), r.exc_info) for r in caplog.records]
    assert len(lines) == 2 and not any(exc_info for _, _, exc_info in lines)
    assert lines[0][0] == logging.WARNING and lines[0][1].startswith("sweeper: Redis unreachable (ConnectionError")
    assert lines[1][1] == "sweeper: Redis reachable again after 5.0 s (51 failed calls meanwhile)"


def test_an_unexpected_error_is_logged_with_its_traceback_every_time(caplog: pytest.LogCaptureFixture) -> None:
    outage = OutageLog(logging.getLogger("tests.outage"), "sweeper")
    with caplog.at_level(logging.INFO, logger="tests.outage"):
        for _ in range(2):
            outage.failed(redis_errors.ResponseError("ERR unknown command"))
        outage.succeeded()  # no outage began: none ends
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
    assert all(r.exc_info and r.exc_info[0] is redis_errors.ResponseError for r in caplog.records)


def test_a_loop_retrying_redis_never_waits_more_than_a_second_between_tries() -> None:
    """However long the outage, the wait between two tries stays within the cap (the longest
    draw of the jitter every time), and a call that worked starts the waits short again."""
    backoff = Backoff(rng=lambda: 1.0)
    waits = [backoff.next_delay() for _ in range(40)]
    assert waits[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert max(waits) == RETRY_CAP_S == 1.0
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.1)
