"""``tether.Client`` against a real coordinator: paging, errors, and the live feed across a
coordinator restart."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import ADMIN, CoordinatorProcess, free_port
from tether import Client, Feed, TetherError

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(coordinator: CoordinatorProcess) -> Iterator[Client]:
    with Client(coordinator.url, ADMIN, timeout=5) as c:
        yield c


def test_iterators_follow_every_page(client: Client) -> None:
    ids = [client.create_task(goal=f"goal {i}", device_id="paged-1")["task_id"] for i in range(3)]
    page = client.list_tasks(device_id="paged-1", limit=1)
    assert [t["task_id"] for t in page["tasks"]] == ids[-1:] and page["next_cursor"] is not None
    assert [t["task_id"] for t in client.iter_tasks(device_id="paged-1", page_size=1)] == ids[::-1]
    assert client.create_task(goal="again", device_id="paged-1", idempotency_key="k-1")["task_id"] == \
        client.create_task(goal="again", device_id="paged-1", idempotency_key="k-1")["task_id"]


def test_errors_carry_the_contract_code_and_never_the_token(coordinator: CoordinatorProcess, client: Client) -> None:
    token = "secret-operator-token"
    with Client(coordinator.url, token) as wrong, pytest.raises(TetherError) as raised:
        wrong.list_hosts()
    assert (raised.value.code, raised.value.status) == ("unauthorized", 401)
    assert token not in repr(raised.value) and token not in str(raised.value) and token not in repr(wrong)

    with pytest.raises(TetherError) as raised:
        client.get_task("t_missing")
    assert (raised.value.code, raised.value.status) == ("not_found", 404)
    with pytest.raises(TetherError) as raised:
        client.get_device("../hosts")  # never becomes another path
    assert raised.value.code == "invalid_request" and raised.value.status is None
    with Client(f"http://127.0.0.1:{free_port()}", token) as down, pytest.raises(TetherError) as raised:
        down.get_task("t_1")
    assert raised.value.code == "unavailable" and token not in str(raised.value)
    with pytest.raises(ValueError):
        Client(coordinator.url, "two words")


def read_in_background(feed: Feed) -> queue.Queue[dict[str, Any]]:
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=lambda: [events.put(e) for e in feed], daemon=True).start()
    return events


def test_the_feed_misses_nothing_across_a_coordinator_restart(coordinator: CoordinatorProcess, client: Client) -> None:
    # Last in this module: it restarts the module's coordinator (same port, same Redis prefix).
    feed = client.feed(host_id="drain-1").open()
    events = read_in_background(feed)
    coordinator.heartbeat("drain-1", ["dr-9"])
    client.drain_host("drain-1")
    assert events.get(timeout=10)["type"] == "host_online"
    assert events.get(timeout=10)["type"] == "host_draining"

    coordinator.stop()
    coordinator.start()
    client.revoke_host("drain-1")  # before or after the feed is back: it is delivered either way
    revoked = events.get(timeout=10)
    assert (revoked["type"], revoked["host_id"]) == ("host_revoked", "drain-1")
    assert feed.reconnects >= 1
    feed.close()
