"""Reads of live sessions' recordings (lua/includes/sessions.lua). Nothing here changes state
(``store.py`` does, through lua/sendCommand, lua/pollCommands and lua/purgeTasks)."""

from __future__ import annotations

from typing import Any

import orjson

from coordinator.state.reads.common import Reader


class SessionReads(Reader):
    """The session reads of `Queries`."""

    async def session_commands(self, task_id: str, after_seq: int, limit: int) -> list[dict[str, Any]]:
        """A page of a session's recording, oldest first: the commands whose seq is above
        ``after_seq``, at most ``limit`` (two reads; a command dropped between them is left out)."""
        ids = await self.redis.zrangebyscore(self.keys.command_log(task_id), f"({after_seq}", "+inf",
                                             start=0, num=limit)
        if not ids:
            return []
        raws = await self.redis.hmget(self.keys.commands(task_id), [i for i in ids if isinstance(i, bytes | str)])
        return [orjson.loads(raw) for raw in raws if raw is not None]
