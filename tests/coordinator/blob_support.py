"""The S3 side of the artifact tests: a real S3-protocol server process (moto's standalone
``moto_server`` on a loopback port; the fixtures of tests/coordinator/conftest.py start it once per
session), each test with a bucket of its own."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

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

    def stored_bytes(self, bucket: str) -> int:
        """The bytes of every object of the bucket (ListObjectsV2's sizes; one page of 1,000)."""
        listed = httpx.get(f"{self.url}/{bucket}", params={"list-type": "2"}).text
        return sum(int(part.split("</Size>")[0]) for part in listed.split("<Size>")[1:])


def moto_available() -> bool:
    return Path(sys.executable).with_name("moto_server").exists()


@contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """moto's standalone S3 server on a free loopback port, stopped at the end of the block."""
    port = free_port()
    process = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def answers(probe: httpx.Client) -> bool:
        try:
            return probe.get(url).status_code < 500
        except httpx.TransportError:
            return False

    try:
        with httpx.Client(timeout=1) as probe:  # httpx.get would build a client (and a TLS context) a probe
            wait_until(lambda: answers(probe), 30, what="moto_server answering")
        yield S3Server(url)
    finally:
        process.terminate()
        process.wait(10)
