"""The blob store's contract, on both implementations: a local folder, and an S3 bucket on a real
S3-protocol server process (moto_server)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from coordinator.blobs.artifacts import open_blob_store
from coordinator.blobs.folder import (
    BlobMissing,
    BlobStore,
    BlobTooLarge,
    LocalBlobStore,
    namespace_of,
)
from coordinator.blobs.s3 import S3BlobStore, parse_s3_url
from coordinator.settings import Settings
from tests.coordinator.blob_support import S3Server

pytestmark = pytest.mark.anyio

NS = namespace_of("t_1")


@pytest.fixture(params=["local", "s3"])
async def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "local":
        store: BlobStore = LocalBlobStore(tmp_path / "artifacts")
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        request.getfixturevalue("s3_env")
        store = S3BlobStore(f"s3://{server.new_bucket()}/some/prefix", server.url)
    yield store
    await store.aclose()


async def chunks_of(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]


async def read(blobs: BlobStore, key: str) -> bytes:
    return b"".join([chunk async for chunk in await blobs.open(key)])


async def test_a_blob_is_stored_under_its_sha256_in_the_tasks_namespace(blobs: BlobStore) -> None:
    data = os.urandom(200_000)
    blob = await blobs.put(NS, chunks_of(data), max_bytes=1 << 20)
    assert blob.sha256 == hashlib.sha256(data).hexdigest()
    assert blob.key == f"{NS}/{blob.sha256}" and blob.size == len(data)
    assert await read(blobs, blob.key) == data
    again = await blobs.put(NS, chunks_of(data, 7000), max_bytes=1 << 20)
    assert again == blob
    assert [entry.key for entry in await blobs.list_after("", 10)] == [blob.key]


async def test_bytes_past_the_cap_are_refused_and_leave_nothing(blobs: BlobStore) -> None:
    with pytest.raises(BlobTooLarge):
        await blobs.put(NS, chunks_of(b"x" * 5001), max_bytes=5000)
    assert await blobs.list_after("", 10) == []
    exactly = await blobs.put(NS, chunks_of(b"x" * 5000), max_bytes=5000)
    assert exactly.size == 5000


async def test_staged_bytes_are_no_blob_until_committed_and_a_discard_leaves_nothing(blobs: BlobStore) -> None:
    discarded = await blobs.stage(NS, chunks_of(b"refused"), max_bytes=100)
    await discarded.discard()
    staged = await blobs.stage(NS, chunks_of(b"accepted"), max_bytes=100)
    assert not await blobs.exists(staged.blob.key)
    assert [e.key for e in await blobs.list_after("", 10) if not e.key.startswith(".tmp/")] == []
    await staged.commit()
    await staged.discard()  # after the commit: nothing left to delete, the blob stays
    assert await blobs.exists(staged.blob.key) and await read(blobs, staged.blob.key) == b"accepted"
    assert [e.key for e in await blobs.list_after("", 10)] == [staged.blob.key]


async def test_delete_is_idempotent_and_a_missing_blob_says_so(blobs: BlobStore) -> None:
    blob = await blobs.put(NS, chunks_of(b"bytes"), max_bytes=100)
    await blobs.delete([blob.key])
    await blobs.delete([blob.key])
    with pytest.raises(BlobMissing):
        await blobs.open(blob.key)
    assert await blobs.list_after("", 10) == []


async def test_listing_pages_in_key_order_from_a_cursor(blobs: BlobStore) -> None:
    keys = sorted([(await blobs.put(namespace_of(f"t_{i}"), chunks_of(bytes([i]) * 10), 100)).key
                   for i in range(5)])
    first = await blobs.list_after("", 2)
    second = await blobs.list_after(first[-1].key, 2)
    third = await blobs.list_after(second[-1].key, 2)
    assert [e.key for e in first + second + third] == keys
    assert await blobs.list_after(keys[-1], 2) == []


async def test_a_key_that_is_not_the_stores_own_never_reaches_a_path(blobs: BlobStore) -> None:
    for key in ("../etc/passwd", f"{NS}/../../x", "/abs", f"{NS}/{'a' * 63}"):
        with pytest.raises(ValueError):
            await blobs.open(key)
        with pytest.raises(ValueError):
            await blobs.delete([key])
    with pytest.raises(ValueError):
        await blobs.put("../up", chunks_of(b"x"), 10)


def test_the_s3_url_names_a_bucket_and_a_prefix() -> None:
    assert parse_s3_url("s3://bucket/a/b/") == ("bucket", "a/b")
    assert parse_s3_url("s3://bucket") == ("bucket", "")
    for bad in ("http://bucket/x", "s3:///x", "s3://b/x?y=1"):
        with pytest.raises(ValueError):
            parse_s3_url(bad)


async def test_a_blob_past_one_part_goes_up_in_parts_and_reads_back_whole(blobs: BlobStore) -> None:
    data = os.urandom(11 * 1024 * 1024)  # three parts on S3
    blob = await blobs.put(NS, chunks_of(data, 64 * 1024), max_bytes=len(data))
    assert blob.size == len(data) and await read(blobs, blob.key) == data


def test_the_artifact_settings_have_the_contracts_names_and_refuse_a_url_that_is_not_s3(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("COORDINATOR_ARTIFACTS_DIR", "COORDINATOR_ARTIFACTS_URL", "COORDINATOR_MAX_ARTIFACT_BYTES",
                 "COORDINATOR_MAX_TASK_ARTIFACT_BYTES"):
        monkeypatch.delenv(name, raising=False)
    names = {field: Settings.variable(field) for field in ("artifacts_dir", "artifacts_url", "artifacts_endpoint",
                                                           "max_artifact_bytes", "max_task_artifact_bytes")}
    assert names == {"artifacts_dir": "COORDINATOR_ARTIFACTS_DIR", "artifacts_url": "COORDINATOR_ARTIFACTS_URL",
                     "artifacts_endpoint": "COORDINATOR_ARTIFACTS_ENDPOINT",
                     "max_artifact_bytes": "COORDINATOR_MAX_ARTIFACT_BYTES",
                     "max_task_artifact_bytes": "COORDINATOR_MAX_TASK_ARTIFACT_BYTES"}
    defaults = Settings()
    assert (defaults.artifacts_dir, defaults.artifacts_url) == (Path("tether-artifacts"), None)
    assert (defaults.max_artifact_bytes, defaults.max_task_artifact_bytes) == (10 * 1024 * 1024, 100 * 1024 * 1024)
    assert isinstance(open_blob_store(defaults), LocalBlobStore)
    assert Settings(artifacts_url="").artifacts_url is None
    with pytest.raises(ValidationError, match="s3://bucket/prefix"):
        Settings(artifacts_url="https://bucket.example/prefix")
