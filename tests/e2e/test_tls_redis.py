"""rediss:// with a managed Redis's self-signed certificate: refused by default, accepted when
COORDINATOR_REDIS_TLS_INSECURE is set."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import (
    coordinator_env,
    coordinator_process,
    free_port,
    unique_prefix,
    wait_until,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[int]:
    if not shutil.which("openssl") or not shutil.which("redis-server"):
        pytest.skip("needs openssl and redis-server")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "cert.pem",
         "-days", "1", "-subj", "/CN=managed-redis.example"],
        cwd=tmp_path, check=True, capture_output=True,
    )
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--tls-cert-file", "cert.pem",
         "--tls-key-file", "key.pem", "--tls-auth-clients", "no", "--save", "", "--appendonly", "no"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )

    def answers() -> bool:
        ping = subprocess.run(["redis-cli", "--tls", "--insecure", "-p", str(port), "ping"], capture_output=True)
        return ping.stdout.strip() == b"PONG"

    try:
        wait_until(answers, 10, what="TLS redis-server")
        yield port
    finally:
        server.terminate()
        server.wait(10)


def test_rediss_with_self_signed_certificate(tls_redis: int) -> None:
    url = f"rediss://127.0.0.1:{tls_redis}/0"
    env = coordinator_env(unique_prefix(), REDIS_URL=url, COORDINATOR_REDIS_TLS_INSECURE="true")
    # The keys live on the throwaway server: nothing to clean up on the shared one.
    with coordinator_process(env) as coordinator:
        assert httpx.get(f"{coordinator.url}/readyz").json()["redis"] is True
    # without the setting, the unverifiable certificate is refused and the process does not start
    strict = coordinator_env(unique_prefix(), REDIS_URL=url)
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--port", str(free_port())],
        env=strict, capture_output=True, timeout=60, cwd="/",
    )
    assert result.returncode != 0
    assert b"certificate verify failed" in result.stderr.lower() or b"ssl" in result.stderr.lower()
