"""Reads of artifacts' descriptions (the bytes are the blob store's: coordinator/blobs/folder.py).
Nothing here changes state (``store.py`` does, through lua/recordArtifact and lua/purgeTasks)."""

from __future__ import annotations

from typing import Any

import orjson

from coordinator.state.reads.common import Reader


def _task_range(task_id: str) -> tuple[bytes, bytes]:
    """ZRANGEBYLEX bounds of a task's members ``task id\\0attempt\\0name`` (``prefixRange``)."""
    return b"[" + task_id.encode() + b"\0", b"(" + task_id.encode() + b"\1"


class ArtifactReads(Reader):
    """The artifact reads of `Queries`."""

    async def task_artifacts(self, task_id: str) -> list[dict[str, Any]] | None:
        """Every attempt's artifacts of the task, by attempt then upload; None: no such task.
        (At most COORDINATOR_MAX_TASK_ARTIFACTS of them, so one read.)"""
        low, high = _task_range(task_id)
        async with self._pipeline() as pipe:
            pipe.hexists(self.keys.tasks, task_id)
            pipe.zrangebylex(self.keys.artifact_index, low, high)
            exists, members = await pipe.execute()
        if not exists:
            return None
        if not members:
            return []
        raws = await self.redis.hmget(self.keys.artifacts, members)
        found = [orjson.loads(raw) for raw in raws if raw is not None]  # None: purged meanwhile
        found.sort(key=lambda a: (a["attempt"], a["created_at"], a["name"]))
        return found

    async def task_artifact(self, task_id: str, name: str, attempt: int | None) -> dict[str, Any] | None:
        """One artifact's description: of ``attempt``, or of the latest attempt that has the
        name when None."""
        if attempt is not None:
            raw = await self.redis.hget(self.keys.artifacts, f"{task_id}\0{attempt}\0{name}")
            return None if raw is None else orjson.loads(raw)
        named = [a for a in await self.task_artifacts(task_id) or [] if a["name"] == name]
        return named[-1] if named else None
