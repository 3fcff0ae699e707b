"""rediss:// with a managed Redis's self-signed certificate: refused by default, accepted when
COORDINATOR_REDIS_TLS_INSECURE is set."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import unique_prefix
from tests.e2e.processes import coordinator_env, coordinator_process, free_port

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
    deadline = time.monotonic() + 10
    while subprocess.run(["redis-cli", "--tls", "--insecure", "-p", str(port), "ping"],
                         capture_output=True).stdout.strip() != b"PONG":
        assert time.monotonic() < deadline, "TLS redis did not start"
        time.sleep(0.05)
    yield port
    server.terminate()
    server.wait(10)


def test_rediss_with_self_signed_certificate(tls_redis: int) -> None:
    url = f"rediss://127.0.0.1:{tls_redis}/0"
    env = coordinator_env(unique_prefix(), REDIS_URL=url, COORDINATOR_REDIS_TLS_INSECURE="true")
    with coordinator_process(env) as (base, _):
        import httpx

        assert httpx.get(f"{base}/readyz").json()["redis"] is True
    # without the setting, the unverifiable certificate is refused and the process does not start
    strict = coordinator_env(unique_prefix(), REDIS_URL=url)
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--port", str(free_port())],
        env=strict, capture_output=True, timeout=60, cwd="/",
    )
    assert result.returncode != 0
    assert b"certificate verify failed" in result.stderr.lower() or b"ssl" in result.stderr.lower()
