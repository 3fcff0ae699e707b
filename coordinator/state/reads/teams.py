"""Reads of the teams (PROTOCOL.md, "Sharing the fleet"): each team's settings and counts as the
scripts keep them (lua/includes/teams.lua), and the device time its runs used in the last hour.
Nothing here changes state (``store.py`` does, through scripts)."""

from __future__ import annotations

from typing import Any, cast

import orjson

import wire
from coordinator.state.reads.common import Reader, text
from coordinator.state.records import TeamShare

HOUR_MS = 3_600_000


def _usage_ms(raw: dict[Any, Any], now_ms: int) -> int:
    """The ms of a team's ended runs within the last hour, from its fields minute -> ms (or, as
    earlier versions wrote them until they age out, minute % 60 -> "<minute>:<ms>")."""
    this_minute = now_ms // 60_000
    used = 0
    for field, value in raw.items():
        minute, _, ms = text(value).rpartition(":")
        if int(minute or text(field)) > this_minute - 60:
            used += int(ms)
    return used


class TeamReads(Reader):
    """The team reads of `Queries`."""

    async def teams(self) -> list[TeamShare]:
        """Every team with work, a setting or a token, by name."""
        k = self.keys
        fields = {text(name): text(value) for name, value in (await self.redis.hgetall(k.teams)).items()}
        settings: dict[str, dict[str, Any]] = {}
        counts: dict[str, dict[str, int]] = {}
        for field, value in fields.items():
            team, _, count = field.partition("|")
            if count:
                counts.setdefault(team, {})[count] = int(value)
            else:
                settings[team] = orjson.loads(value)
        names = sorted(set(settings) | set(counts))
        if not names:
            return []
        high, low = k.status_scores(wire.TaskStatus.RUNNING.value)
        async with self._pipeline() as pipe:
            for team in names:
                pipe.hgetall(k.team_usage(team))
            pipe.zrangebyscore(k.tasks_by_status, low, high)
            replies, now = await self._with_clock(pipe)
        running_ids = cast("list[bytes]", replies[-1])
        running = await self._running_ms(running_ids, now)
        return [TeamShare(
            team,
            int(settings.get(team, {}).get("weight") or 1),
            settings.get(team, {}).get("max_devices"),
            counts.get(team, {}).get("running", 0),
            counts.get(team, {}).get("queued", 0),
            (_usage_ms(usage, now) + running.get(team, 0)) / 1000,
        ) for team, usage in zip(names, replies[:-1], strict=True)]

    async def _running_ms(self, task_ids: list[bytes], now_ms: int) -> dict[str, int]:
        """The device time running tasks have used within the last hour, by team (at most one
        running task per device, so this is bounded by the fleet)."""
        if not task_ids:
            return {}
        used: dict[str, int] = {}
        for raw in await self.redis.hmget(self.keys.tasks, task_ids):
            if raw is None:
                continue
            task = orjson.loads(raw)
            started = task.get("started_at")
            if started is not None:
                team = task.get("team") or wire.DEFAULT_TEAM
                used[team] = used.get(team, 0) + now_ms - max(started, now_ms - HOUR_MS)
        return used
