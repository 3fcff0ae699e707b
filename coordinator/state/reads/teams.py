"""Reads of the teams (PROTOCOL.md, "Sharing the fleet"): each team's settings and counts as the
scripts keep them (lua/includes/teams.lua), and the device time its runs used in the last hour.
Nothing here changes state (``store.py`` does, through scripts)."""

from __future__ import annotations

from typing import Any, cast

import orjson

import wire
from coordinator.state.reads.common import Page, Reader, text
from coordinator.state.records import TeamShare

HOUR_MS = 3_600_000
# The fields of a team that its share reads (lua/includes/teams.lua): settings, devices held, queued.
_FIELDS = ("", "|running", "|queued")
# Teams read at a time when every one is read (/metrics).
TEAMS_READ = 500


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
        """Every team not forgotten, by name (``/metrics``): page after page."""
        shares: list[TeamShare] = []
        cursor: str | None = None
        while True:
            page = await self.teams_page(limit=TEAMS_READ, cursor=cursor)
            shares += page.items
            if page.next_cursor is None:
                return shares
            cursor = page.next_cursor

    async def teams_page(self, *, limit: int, cursor: str | None) -> Page:
        """At most ``limit`` teams by name, after ``cursor`` (the last name of the page before):
        every team with a task kept, a token or a setting (lua/includes/teams.lua, team_names)."""
        low = "-" if cursor is None else f"({cursor}"
        names = [text(n) for n in cast("list[bytes]", await self.redis.zrangebylex(
            self.keys.team_names, low, "+", start=0, num=limit + 1))]
        more = len(names) > limit
        names = names[:limit]
        return Page(await self.team_shares(names), names[-1] if more else None)

    async def team_shares(self, names: list[str]) -> list[TeamShare]:
        """These teams' settings and counts (a team never named: the defaults and none), in order."""
        if not names:
            return []
        k = self.keys
        high, low = k.status_scores(wire.TaskStatus.RUNNING.value)
        async with self._pipeline() as pipe:
            pipe.hmget(k.teams, [f"{team}{suffix}" for team in names for suffix in _FIELDS])
            for team in names:
                pipe.hgetall(k.team_usage(team))
            pipe.zrangebyscore(k.tasks_by_status, low, high)
            replies, now = await self._with_clock(pipe)
        fields, usages, running_ids = replies[0], replies[1:-1], cast("list[bytes]", replies[-1])
        running = await self._running_ms(running_ids, now)
        shares: list[TeamShare] = []
        for i, team in enumerate(names):
            raw_settings, held, queued = fields[i * len(_FIELDS): (i + 1) * len(_FIELDS)]
            settings = orjson.loads(raw_settings) if raw_settings is not None else {}
            shares.append(TeamShare(
                team,
                int(settings.get("weight") or 1),
                settings.get("max_devices"),
                int(held or 0),
                int(queued or 0),
                (_usage_ms(usages[i], now) + running.get(team, 0)) / 1000,
            ))
        return shares

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
