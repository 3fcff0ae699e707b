"""Fixtures of the coordinator tests that start something: moto's S3 server for the S3 blob store."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.coordinator.blob_support import (
    S3_ENV,
    S3Server,
    moto_available,
    running_s3_server,
)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    if not moto_available():
        pytest.skip("moto_server is not installed (pip install -e '.[test]')")
    with running_s3_server() as server:
        yield server


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)
