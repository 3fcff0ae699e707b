"""Fixtures of the coordinator tests that start something: moto's S3 server for the S3 blob store."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.coordinator.blob_support import S3_ENV, S3Server
from tests.support import free_port, wait_until


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    port = free_port()
    moto = Path(sys.executable).with_name("moto_server")
    if not moto.exists():
        pytest.skip("moto_server is not installed (pip install -e '.[test]')")
    process = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code < 500
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, 30, what="moto_server answering")
        yield S3Server(url)
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)
