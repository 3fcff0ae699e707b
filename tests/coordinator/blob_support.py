"""The S3 side of the artifact tests: a real S3-protocol server process (moto's standalone
``moto_server`` on a loopback port; the fixtures of tests/coordinator/conftest.py start it once per
session), each test with a bucket of its own."""

from __future__ import annotations

import uuid

import httpx

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
