"""The blob store on an S3-compatible bucket (``COORDINATOR_ARTIFACTS_URL=s3://bucket/prefix``,
``COORDINATOR_ARTIFACTS_ENDPOINT`` for MinIO, Ceph, R2 and the like), through obstore.

Why obstore, of boto3/aiobotocore, obstore and the minio client: it is async without threads
(``put_async``, ``get_async`` and a streamed body, ``list`` in pages with a start-after offset,
bulk ``delete_async``), installs as one wheel with no dependencies on Python 3.11, and is the
Python face of the Rust ``object_store`` crate that Apache Arrow, DataFusion and Polars keep.
boto3 is synchronous; aiobotocore brings botocore and aiohttp and pins botocore's exact release;
the minio client is synchronous (urllib3), so each call would hold a thread.

Credentials and region come from the standard environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``; obstore reads them, and
instance or container credentials too), never from a coordinator setting, so no secret passes
through the coordinator's configuration or its logs.

A put spools the body to an unnamed temporary file (hashed and counted as it streams in: the key
is the bytes' SHA-256, known only at the end), then uploads that file under its key: a crash
leaves no object behind (the OS removes the unnamed file). The upload to the bucket reads the file
a part at a time (one PUT up to 5 MiB, else 5 MiB parts, two in flight), so an upload holds at
most 10 MiB in memory while it goes up, whatever the artifact's size.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import BaseError as ObstoreError
from obstore.store import S3Store

if TYPE_CHECKING:  # obstore declares its option dicts in its stubs only
    from obstore.store import ClientConfig, RetryConfig, S3Config

from coordinator.blobs.folder import (
    Blob,
    BlobMissing,
    BlobStoreFailed,
    Listed,
    check_key,
    check_namespace,
    spool,
)

_PARTS_IN_FLIGHT = 2


@contextlib.contextmanager
def _failures() -> Iterator[None]:
    """The bucket's refusals and an unreachable endpoint, as ``BlobStoreFailed``."""
    try:
        yield
    except (ObstoreError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise BlobStoreFailed(f"{type(exc).__name__}: {exc}") from exc


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://bucket/prefix``; ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError("must look like s3://bucket/prefix")
    return parts.netloc, parts.path.strip("/")


class S3BlobStore:
    def __init__(self, url: str, endpoint: str | None = None) -> None:
        bucket, prefix = parse_s3_url(url)
        self.url = url
        config: S3Config = {}
        client_options: ClientConfig = {}
        if endpoint:
            config["endpoint"] = endpoint
            # MinIO and the like are often addressed by path, and on a private network by http.
            config["virtual_hosted_style_request"] = False
            client_options["allow_http"] = endpoint.startswith("http://")
        # An upload waits for the store while its agent waits for the answer: a store that does not
        # answer within seconds is answered 503 (the agent retries later), not minutes later.
        client_options["connect_timeout"] = timedelta(seconds=5)
        retry: RetryConfig = {"max_retries": 3, "retry_timeout": timedelta(seconds=15)}
        self._store = S3Store(bucket, prefix=prefix or None, config=config, client_options=client_options,
                              retry_config=retry)

    async def put(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Blob:
        check_namespace(namespace)
        with tempfile.TemporaryFile() as file, _failures():
            sha256, size = await spool(chunks, file, max_bytes)
            file.seek(0)
            key = f"{namespace}/{sha256}"
            # Past one part (5 MiB) obstore uploads in parts, each read into memory: two at a
            # time bound what one upload holds to 10 MiB, and keep a part in flight while the
            # next is read.
            await obstore.put_async(self._store, key, file, max_concurrency=_PARTS_IN_FLIGHT)
        return Blob(key, sha256, size)

    async def open(self, key: str) -> AsyncIterator[bytes]:
        try:
            with _failures():
                got = await obstore.get_async(self._store, check_key(key))
        except FileNotFoundError:
            raise BlobMissing(key) from None
        return self._chunks(got)

    @staticmethod
    async def _chunks(got: Any) -> AsyncIterator[bytes]:
        async for chunk in got.stream():
            yield bytes(chunk)

    async def delete(self, keys: list[str]) -> None:
        if keys:
            checked = [check_key(key) for key in keys]
            with _failures():
                await obstore.delete_async(self._store, checked)

    async def list_after(self, cursor: str, limit: int) -> list[Listed]:
        with _failures():
            pages = obstore.list(self._store, offset=cursor or None, chunk_size=limit)
            async for page in pages:
                return [Listed(entry["path"], entry["last_modified"].timestamp()) for entry in page[:limit]]
        return []

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"S3BlobStore({self.url!r})"
