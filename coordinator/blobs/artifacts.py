"""Artifacts: the blob store as the coordinator uses it, timed, with the bound on concurrent
uploads, and the two ways blobs leave it (docs/operations.md, "Artifacts").

An upload writes in this order: the bytes to a temporary name of the blob store (``stage``), the
description to Redis (lua/recordArtifact, which checks the lease and the caps), then the bytes
become the blob under their SHA-256 (``commit``). A description refused, or a client gone, deletes
the temporary at once: nothing refused stays. A crash between the writes leaves a temporary file,
or a description whose blob is missing (reads answer 404) until the agent's retry, which finds
the blob missing and stores it; a commit that fails (the bucket unreachable) the same, answered
503. Blobs leave the store:

- with their task: retention's script (lua/purgeTasks) deletes the descriptions and answers the
  blob keys no description names any more; ``purge`` deletes those from the store after the
  script. A process that dies in between leaves orphans, found as below.
- as orphans: ``sweep_orphans`` reads one page of the store's keys (a cursor that wraps around),
  and deletes each key older than ``COORDINATOR_ARTIFACT_ORPHAN_GRACE_S`` that ``artifact_blobs``
  does not hold (temporary files included). The grace covers an upload still streaming into its
  temporary file. What it does not cover: the same task uploading the
  same bytes again in the instant between the sweep's read of ``artifact_blobs`` and its delete,
  for a blob orphaned more than the grace ago; that upload's description then names a missing
  blob, which reads answer 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterator

from redis.asyncio import Redis

from coordinator.blobs.folder import (
    Blob,
    BlobStore,
    BlobStoreFailed,
    Listed,
    LocalBlobStore,
    Staged,
    is_key,
)
from coordinator.cancellation import cancelling
from coordinator.errors import Unavailable
from coordinator.metrics import Metrics
from coordinator.settings import Settings
from coordinator.state.keys import Keys
from coordinator.state.store import Store

log = logging.getLogger("coordinator.blobs.artifacts")

# Keys of the store one orphan sweep looks at.
SWEEP_PAGE = 200
# Retention's batch (tasks per script call), as the reaper's other sweeps.
PURGE_BATCH = 200


@contextlib.contextmanager
def _store_unavailable(operation: str) -> Iterator[None]:
    """A failing store, logged (its reason, never in an answer), as the contract's 503."""
    try:
        yield
    except BlobStoreFailed as exc:
        log.warning("the artifact store failed a %s: %s", operation, exc)
        raise Unavailable("the artifact store cannot be reached; retry shortly") from None


def open_blob_store(settings: Settings) -> BlobStore:
    """The blob store the settings name: the S3 bucket of COORDINATOR_ARTIFACTS_URL, else the
    local folder COORDINATOR_ARTIFACTS_DIR (created on the first upload)."""
    if settings.artifacts_url:
        from coordinator.blobs.s3 import (
            S3BlobStore,  # only a deployment on S3 needs obstore
        )

        return S3BlobStore(settings.artifacts_url, settings.artifacts_endpoint)
    return LocalBlobStore(settings.artifacts_dir)


class Artifacts:
    def __init__(self, blobs: BlobStore, redis: Redis, keys: Keys, metrics: Metrics, *,
                 max_uploads: int, orphan_grace_s: float) -> None:
        self.blobs = blobs
        self._redis = redis
        self._keys = keys
        self._metrics = metrics
        self._max_uploads = max_uploads
        self._uploads = 0
        self._orphan_grace_s = orphan_grace_s
        self._cursor = ""

    @contextlib.contextmanager
    def _timed(self, operation: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._metrics.artifact_store_seconds.labels(operation).observe(time.perf_counter() - start)

    @contextlib.contextmanager
    def upload_slot(self) -> Iterator[None]:
        """One of this process's ``COORDINATOR_MAX_CONCURRENT_UPLOADS``; when all are taken,
        ``Unavailable`` (503 with Retry-After) at once: the agent retries a little later, and a
        burst of uploads never queues behind itself holding connections."""
        if self._uploads >= self._max_uploads:
            raise Unavailable("this coordinator process streams as many uploads as it may; retry shortly")
        self._uploads += 1
        try:
            yield
        finally:
            self._uploads -= 1

    async def stage(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Staged:
        """The bytes under a temporary name; ``BlobTooLarge``, or ``Unavailable`` (503) when the
        store fails. The caller commits or discards it."""
        with self._timed("put"), _store_unavailable("put"):
            return await self.blobs.stage(namespace, chunks, max_bytes)

    async def commit(self, staged: Staged) -> None:
        """The staged bytes become their blob; ``Unavailable`` (503) when the store fails."""
        with self._timed("commit"), _store_unavailable("commit"):
            await staged.commit()

    async def put(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Blob:
        """Staged and committed at once (no description to wait for)."""
        staged = await self.stage(namespace, chunks, max_bytes)
        try:
            await self.commit(staged)
        finally:
            await staged.discard()
        return staged.blob

    async def open(self, key: str) -> AsyncIterator[bytes]:
        """The blob's chunks; ``BlobMissing``, or ``Unavailable`` (503) when the store fails."""
        with self._timed("get"), _store_unavailable("get"):
            return await self.blobs.open(key)

    async def exists(self, key: str) -> bool:
        """Whether the blob is in the store; ``Unavailable`` (503) when the store fails."""
        with self._timed("head"), _store_unavailable("head"):
            return await self.blobs.exists(key)

    async def delete(self, keys: list[str]) -> None:
        with self._timed("delete"):
            await self.blobs.delete(keys)

    async def _list(self, cursor: str, limit: int) -> list[Listed]:
        with self._timed("list"):
            return await self.blobs.list_after(cursor, limit)

    async def purge(self, store: Store) -> int:
        """Retention, to the end of what is due: tasks deleted by the script, then the blobs it
        freed deleted from the store. How many tasks were deleted."""
        deleted = 0
        while True:
            purge = await store.purge_tasks(PURGE_BATCH)
            deleted += purge.acted
            if purge.blobs:
                try:
                    await self.delete(purge.blobs)
                except BlobStoreFailed as exc:  # they are orphans now: the orphan sweep takes them
                    log.warning("the artifact store failed to delete %d purged blobs (%s); the orphan "
                                "sweep deletes them later", len(purge.blobs), exc)
            if purge.taken < PURGE_BATCH:
                return deleted

    async def sweep_orphans(self, limit: int = SWEEP_PAGE, now_s: float | None = None) -> int:
        """One page of the orphan sweep (see the module's docstring); how many blobs it deleted.
        ``now_s``: the time to judge ages by (tests; else the wall clock)."""
        page = await self._list(self._cursor, limit)
        self._cursor = page[-1].key if len(page) >= limit else ""  # wrap around at the end
        old_before = (time.time() if now_s is None else now_s) - self._orphan_grace_s
        old = [entry.key for entry in page if entry.modified_s < old_before and is_key(entry.key)]
        if not old:
            return 0
        named = await self._redis.smismember(self._keys.artifact_blobs, old)
        orphans = [key for key, is_named in zip(old, named, strict=True) if not is_named]
        if orphans:
            await self.delete(orphans)
            log.info("deleted %d orphaned artifact blobs", len(orphans))
        return len(orphans)


async def run_orphan_sweeper(artifacts: Artifacts, interval_s: float) -> None:
    """A page of the orphan sweep every ``interval_s`` until cancelled; failures are logged and
    the next page tried at the next interval."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await artifacts.sweep_orphans()
        except asyncio.CancelledError:
            raise
        except Exception:  # a store or Redis hiccup: try again next time
            if cancelling():
                raise asyncio.CancelledError from None
            log.warning("the orphan sweep failed; it tries again in %.0f s", interval_s, exc_info=True)
