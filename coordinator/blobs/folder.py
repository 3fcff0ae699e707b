"""The blob store: where artifacts' bytes live, outside Redis, behind one seam (``BlobStore``).

Two implementations, chosen once at start from the settings (``open_blob_store``): a local
directory (``LocalBlobStore``, the default: ``COORDINATOR_ARTIFACTS_DIR``) and an S3-compatible
bucket (``coordinator/blobs/s3.py``: ``COORDINATOR_ARTIFACTS_URL=s3://bucket/prefix``).

A blob's key is ``<namespace>/<sha256>``: the namespace is a digest of the task id
(``namespace_of``) and the name is the SHA-256 of the bytes, computed while they stream in. No
name from a request ever reaches a path or an object key. Blobs are per task, so deleting a
purged task's blobs can never take bytes another task's artifact still names (two artifacts of one
task with the same bytes share one blob; Redis's ``artifact_blobs`` set says which keys are named).

``stage`` streams: the bytes go to a temporary file as they arrive (hashed and counted on the
way, refused past ``max_bytes``), never held whole in memory, and nothing under a blob's key
exists yet. The caller records the description first; only then does ``Staged.commit`` make the
file the blob (a rename on the local store, an upload on S3), and ``Staged.discard`` deletes it
at once when the description was refused or the client hung up. So bytes the service refuses
leave nothing in the store; a process that dies mid-upload leaves at most a temporary file,
which the orphan sweep removes once it is old (the local store's; S3's is unnamed, and goes with
the process). ``put`` is the two at once, for a caller with nothing to decide in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

# What the local store reads a blob in, and what a temporary file's name is made of.
CHUNK_BYTES = 64 * 1024
TMP = ".tmp"
_NAMESPACE = re.compile(r"[0-9a-f]{32}")
# Every key a store hands out or accepts: a blob, or (the local store's) temporary file.
_KEY = re.compile(r"(?:[0-9a-f]{32}/[0-9a-f]{64}|\.tmp/[0-9a-f]{32})")


class BlobTooLarge(Exception):
    """The bytes passed ``max_bytes`` while streaming in; nothing was stored."""


class BlobMissing(Exception):
    """No blob under that key (deleted, or never stored)."""


class BlobStoreFailed(Exception):
    """The store could not do it now: its disk, its network, its credentials. Its text is for the
    log only."""


@dataclass(frozen=True)
class Blob:
    key: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Listed:
    """A key of the store and when its object was last written (Unix seconds)."""

    key: str
    modified_s: float


class Staged(Protocol):
    """Bytes streamed in under a temporary name, not yet the blob ``blob.key``."""

    @property
    def blob(self) -> Blob: ...

    async def commit(self) -> None:
        """Make the bytes the blob ``blob.key`` (the same bytes again replace identical ones)."""

    async def discard(self) -> None:
        """Delete what was not committed; after a commit, nothing. Never fails."""


class BlobStore(Protocol):
    async def stage(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Staged:
        """Stream ``chunks`` in under a temporary name, to become the blob ``<namespace>/<sha256>``
        on ``commit``; ``BlobTooLarge`` past ``max_bytes`` (nothing stored)."""

    async def put(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Blob:
        """``stage`` and ``commit`` at once."""

    async def open(self, key: str) -> AsyncIterator[bytes]:
        """The blob's bytes, in chunks; ``BlobMissing`` (raised here, before any chunk) if absent."""

    async def exists(self, key: str) -> bool:
        """Whether the blob ``key`` is stored."""

    async def delete(self, keys: list[str]) -> None:
        """Delete these keys; one already gone is no error."""

    async def list_after(self, cursor: str, limit: int) -> list[Listed]:
        """At most ``limit`` keys after ``cursor`` ("" for the first), in key order."""

    async def aclose(self) -> None: ...


def namespace_of(task_id: str) -> str:
    """The task's folder of blobs: a digest of its id, so that no request's text names a path."""
    return hashlib.sha256(b"task\0" + task_id.encode()).hexdigest()[:32]


def is_key(key: str) -> bool:
    """Whether ``key`` is one a store hands out (a bucket's prefix may hold other objects)."""
    return _KEY.fullmatch(key) is not None


def check_key(key: str) -> str:
    """``key``, if it is one a store hands out (anything else could name another path)."""
    if not is_key(key):
        raise ValueError("not a blob key")
    return key


def check_namespace(namespace: str) -> str:
    if not _NAMESPACE.fullmatch(namespace):
        raise ValueError("not a blob namespace")
    return namespace


async def stage_and_commit(store: BlobStore, namespace: str, chunks: AsyncIterable[bytes],
                           max_bytes: int) -> Blob:
    """A store's ``put``: staged, then committed."""
    staged = await store.stage(namespace, chunks, max_bytes)
    try:
        await staged.commit()
    finally:
        await staged.discard()
    return staged.blob


async def spool(chunks: AsyncIterable[bytes], file: BinaryIO | None, max_bytes: int) -> tuple[str, int]:
    """Copy ``chunks`` to ``file`` (None: only hash them); their SHA-256 (hex) and size.
    ``BlobTooLarge`` as soon as they pass ``max_bytes``, before the rest is read."""
    digest = hashlib.sha256()
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise BlobTooLarge(f"more than {max_bytes} bytes")
        digest.update(chunk)
        if file is not None:
            file.write(chunk)  # to the page cache: a chunk is at most what one receive brought
    return digest.hexdigest(), size


def _place(tmp: Path, final: Path) -> None:
    # The same bytes again replace a file with identical content. A sweep may remove the
    # namespace's folder between mkdir and the rename: make it again then.
    for _ in range(3):
        final.parent.mkdir(exist_ok=True)
        try:
            os.replace(tmp, final)
            return
        except FileNotFoundError:
            if not tmp.exists():
                raise
    os.replace(tmp, final)


@dataclass
class _LocalStaged:
    blob: Blob
    tmp: Path
    final: Path

    async def commit(self) -> None:
        try:
            await asyncio.to_thread(_place, self.tmp, self.final)
        except OSError as exc:
            raise BlobStoreFailed(f"{type(exc).__name__}: {exc}") from exc

    async def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)  # a metadata call; after the commit's rename, nothing there


class LocalBlobStore:
    """Blobs as files under one directory: ``<root>/<namespace>/<sha256>``, and temporary files
    in ``<root>/.tmp`` (the same file system, so a finished one is renamed into place)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    async def stage(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Staged:
        check_namespace(namespace)
        tmp_dir = self.root / TMP
        try:
            tmp_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BlobStoreFailed(f"{type(exc).__name__}: {exc}") from exc
        tmp = tmp_dir / secrets.token_hex(16)
        try:
            with open(tmp, "wb") as file:  # noqa: ASYNC230 - as spool() writes: to the page cache, no thread hop
                sha256, size = await spool(chunks, file, max_bytes)
        except BaseException as exc:  # too large, the client gone, the disk full: nothing stays
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):  # a full disk, a folder it may not write
                raise BlobStoreFailed(f"{type(exc).__name__}: {exc}") from exc
            raise
        key = f"{namespace}/{sha256}"
        return _LocalStaged(Blob(key, sha256, size), tmp, self._path(key))

    async def put(self, namespace: str, chunks: AsyncIterable[bytes], max_bytes: int) -> Blob:
        return await stage_and_commit(self, namespace, chunks, max_bytes)

    async def open(self, key: str) -> AsyncIterator[bytes]:
        path = self._path(key)
        if not path.is_file():
            raise BlobMissing(key)
        return self._chunks(path)

    @staticmethod
    async def _chunks(path: Path) -> AsyncIterator[bytes]:
        # Opened only once the response reads it, so an answer never sent holds no file.
        with open(path, "rb") as file:  # noqa: ASYNC230 - an open is a metadata call; the reads go to a thread
            while chunk := await asyncio.to_thread(file.read, CHUNK_BYTES):
                yield chunk

    async def exists(self, key: str) -> bool:
        return self._path(key).is_file()  # a metadata call, as open's

    async def delete(self, keys: list[str]) -> None:
        paths = [self._path(key) for key in keys]
        try:
            await asyncio.to_thread(self._delete, paths)
        except OSError as exc:
            raise BlobStoreFailed(f"{type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _delete(paths: list[Path]) -> None:
        for path in paths:
            path.unlink(missing_ok=True)
            if path.parent.name != TMP:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()  # only when empty: the task's last blob went

    async def list_after(self, cursor: str, limit: int) -> list[Listed]:
        return await asyncio.to_thread(self._list_after, cursor, limit)

    def _list_after(self, cursor: str, limit: int) -> list[Listed]:
        found: list[Listed] = []
        try:
            folders = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return found
        first = cursor.split("/", 1)[0]
        for folder in folders:
            if folder < first or not (_NAMESPACE.fullmatch(folder) or folder == TMP):
                continue
            try:
                names = sorted(os.listdir(self.root / folder))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                key = f"{folder}/{name}"
                if key <= cursor or not _KEY.fullmatch(key):
                    continue
                try:
                    modified = os.stat(self.root / key).st_mtime
                except FileNotFoundError:
                    continue
                found.append(Listed(key, modified))
                if len(found) >= limit:
                    return found
        return found

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.root)!r})"
