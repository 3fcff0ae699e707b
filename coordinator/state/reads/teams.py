"""Reads of the teams (PROTOCOL.md, "Sharing the fleet"): each team's settings and counts as the
scripts keep them (lua/includes/teams.lua), and the device time its runs used in the last hour.
Nothing here changes state (``store.py`` does, through scripts)."""

from __future__ import annotations

import asyncio
from typing import cast

import orjson

import wire
from coordinator.state.reads.common import Page, Reader, text
from coordinator.state.records import TeamShare

HOUR_MS = 3_600_000
# Teams read at a time when every one is read (/metrics).
TEAMS_READ = 500
# What readTeams answers of each team: weight, max_devices (-1: none), held, queued, ms used.
_PER_TEAM = 5


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
        """These teams' settings and counts (a team never named: the defaults and none), in order,
        as the scheduler reads them (lua/readTeams), with the device time their running tasks used."""
        if not names:
            return []
        k = self.keys
        high, low = k.status_scores(wire.TaskStatus.RUNNING.value)
        reply, running_ids = await asyncio.gather(
            self._read_teams(self.transport, self.deployment, names, clock_offset_ms=self.clock.offset_ms),
            self.redis.zrangebyscore(k.tasks_by_status, low, high))
        now = int(reply[1])
        running = await self._running_ms(cast("list[bytes]", running_ids), now)
        shares: list[TeamShare] = []
        for i, team in enumerate(names):
            weight, cap, held, queued, used_ms = (int(n) for n in reply[2 + i * _PER_TEAM: 2 + (i + 1) * _PER_TEAM])
            shares.append(TeamShare(team, weight, None if cap < 0 else cap, held, queued,
                                    (used_ms + running.get(team, 0)) / 1000))
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
