"""A real coordinator process releases a waiting long-poll as soon as its client hangs up: the
connection itself tells the poll (``server.CONNECTION``), long before the poll's deadline."""

from __future__ import annotations

import socket

import pytest

from tests.support import (
    HOSTS,
    CoordinatorProcess,
    coordinator_env,
    coordinator_process,
    fresh_prefix,
    wait_until,
)

pytestmark = pytest.mark.e2e

HOST_A = {"authorization": f"Bearer {HOSTS['host-a']}"}


def _metrics_show(coordinator: CoordinatorProcess, line: str) -> bool:
    return line in coordinator.api.get("/metrics").text.splitlines()


def test_a_waiting_poll_is_released_as_soon_as_its_client_hangs_up() -> None:
    with fresh_prefix() as prefix, coordinator_process(coordinator_env(prefix)) as coordinator:
        coordinator.heartbeat("host-a", ["a1"])
        with socket.create_connection(("127.0.0.1", coordinator.port)) as sock:
            sock.sendall(
                b"POST /internal/v1/hosts/host-a/claim?wait_s=60 HTTP/1.1\r\nHost: c\r\n"
                b"Authorization: Bearer " + HOSTS["host-a"].encode() + b"\r\nContent-Length: 0\r\n\r\n"
            )
            wait_until(lambda: _metrics_show(coordinator, "tether_waiting_polls 1.0"), 10, 0.02,
                       what="the poll waiting")
        # hung up: answered within seconds, not at its 60 s deadline
        wait_until(lambda: _metrics_show(coordinator, 'tether_claims_total{outcome="disconnected"} 1.0'), 5, 0.02,
                   what="the poll released as disconnected")
        assert _metrics_show(coordinator, "tether_waiting_polls 0.0")
