"""Blob stores for the artifact tests: a local folder, and an S3 bucket on a real S3-protocol
server process (moto's standalone ``moto_server``, started once per test session on a loopback
port; each test gets a bucket of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import free_port, wait_until

# moto accepts any credentials; obstore reads these from the environment as it would in service.
S3_ENV = {"AWS_ACCESS_KEY_ID": "test-key-id", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_REGION": "us-east-1"}


class S3Server:
    def __init__(self, url: str) -> None:
        self.url = url

    def new_bucket(self) -> str:
        """A fresh bucket's name (created on the server)."""
        name = f"tether-{uuid.uuid4().hex[:16]}"
        assert httpx.put(f"{self.url}/{name}").status_code == 200
        return name

    def keys(self, bucket: str) -> list[str]:
        """Every object key of the bucket, read through the S3 API itself (ListObjectsV2)."""
        listed = httpx.get(f"{self.url}/{bucket}", params={"list-type": "2"}).text
        return [part.split("</Key>")[0] for part in listed.split("<Key>")[1:]]


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
