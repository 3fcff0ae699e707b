"""The operator API for sharing the fleet (/api/v1/teams): each team's share, and the admin's
settings of it (PROTOCOL.md, "Sharing the fleet").
Bearer = an operator credential; its scope was checked before any handler here runs (app.py)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.bodies import TeamSettings
from coordinator.api.context import Context
from coordinator.api.responses import json_response
from coordinator.api.validation import read, require_id
from coordinator.state.records import TeamShare


def team_view(share: TeamShare) -> dict[str, Any]:
    return {
        "team": share.team,
        "weight": share.weight,
        "max_devices": share.max_devices,
        "running": share.running,
        "queued": share.queued,
        "device_seconds_1h": round(share.device_seconds_1h, 3),
    }


async def list_teams(ctx: Context, request: Request) -> Response:
    return json_response({"teams": [team_view(share) for share in await ctx.queries.teams()]})


async def set_team(ctx: Context, request: Request) -> Response:
    team = require_id(request.path_params["team"], "team")
    body = await read(request, TeamSettings, ctx.settings.max_body_bytes)
    change = {name: getattr(body, name) for name in body.model_fields_set}
    share = await ctx.store.set_team(team, change)
    listed = {s.team: s for s in await ctx.queries.teams()}
    return json_response(team_view(listed.get(team, share)))
