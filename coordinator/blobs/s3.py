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

A stage spools the body to an unnamed temporary file of the process (hashed and counted as it
streams in: the key is the bytes' SHA-256, known only at the end; the OS removes the file as it
closes, or as the process dies), then uploads that file under a temporary key (``.tmp/<random>``),
so that a bucket that cannot be reached is known before anything is recorded. Its commit renames
that object to the blob's key (a server-side copy and a delete), its discard deletes it; one a
crash left behind is an orphan to the sweep, like any key no description names. The upload to the bucket reads the file
a part at a time (one PUT up to 5 MiB, else 5 MiB parts, two in flight), so an upload holds at
most 10 MiB in memory while it goes up, whatever the artifact's size.
"""

from __future__ import annotations

import contextlib
import secrets
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
    TMP,
    Blob,
    BlobMissing,
    BlobStoreFailed,
    Listed,
    Staged,
    check_key,
    check_namespace,
    spool,
    stage_and_commit,
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


class _S3Staged:
    def __init__(self, blob: Blob, store: S3Store, tmp_key: str) -> None:
        self.blob = blob
        self._store = store
        self._tmp_key: str | None = tmp_key

    async def commit(self) -> None:
        assert self._tmp_key is not None, "committed once"
        with _failures():
            await obstore.rename_async(self._store, self._tmp_key, self.blob.key)
        self._tmp_key = None

    async def discard(self) -> None:
        tmp_key, self._tmp_key = self._tmp_key, None
        if tmp_key is not None:
            # A failure here leaves the temporary object to the orphan sweep.
            with contextlib.suppress(ObstoreError, OSError):
                await obstore.delete_async(self._store, tmp_key)


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

    async def stage(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Staged:
        check_namespace(namespace)
        tmp_key = f"{TMP}/{secrets.token_hex(16)}"
        with tempfile.TemporaryFile() as file, _failures():
            sha256, size = await spool(chunks, file, max_bytes)
            file.seek(0)
            # Past one part (5 MiB) obstore uploads in parts, each read into memory: two at a
            # time bound what one upload holds to 10 MiB, and keep a part in flight while the
            # next is read.
            await obstore.put_async(self._store, tmp_key, file, max_concurrency=_PARTS_IN_FLIGHT)
        return _S3Staged(Blob(f"{namespace}/{sha256}", sha256, size), self._store, tmp_key)

    async def put(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Blob:
        return await stage_and_commit(self, namespace, chunks, max_bytes)

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

    async def exists(self, key: str) -> bool:
        try:
            with _failures():
                await obstore.head_async(self._store, check_key(key))
        except FileNotFoundError:
            return False
        return True

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
