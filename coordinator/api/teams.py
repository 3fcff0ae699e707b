"""The operator API for sharing the fleet (/api/v1/teams): each team's share, and the admin's
settings of it (PROTOCOL.md, "Sharing the fleet").
Bearer = an operator credential; its scope was checked before any handler here runs (app.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from coordinator.api import limits, shapes
from coordinator.api.bodies import TeamSettings
from coordinator.api.context import Context
from coordinator.api.responses import json_response
from coordinator.api.validation import Query, read, require_id
from coordinator.state.records import TeamShare


def team_view(share: TeamShare) -> shapes.Team:
    return {
        "team": share.team,
        "weight": share.weight,
        "max_devices": share.max_devices,
        "running": share.running,
        "queued": share.queued,
        "device_seconds_1h": round(share.device_seconds_1h, 3),
    }


async def list_teams(ctx: Context, request: Request) -> Response:
    query = Query(request)
    limit = query.limit(*limits.TEAMS_LIMIT)
    cursor = query.id("cursor")
    page = await ctx.queries.teams_page(limit=limit, cursor=cursor)
    return json_response(shapes.Teams(teams=[team_view(share) for share in page.items], next_cursor=page.next_cursor))


async def set_team(ctx: Context, request: Request) -> Response:
    team = require_id(request.path_params["team"], "team")
    body = await read(request, TeamSettings, ctx.settings.max_body_bytes)
    change = {name: getattr(body, name) for name in body.model_fields_set}
    await ctx.store.set_team(team, change)
    [share] = await ctx.queries.team_shares([team])
    return json_response(team_view(share))
