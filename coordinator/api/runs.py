"""The operator API for runs (/api/v1/runs, PROTOCOL.md "Runs"): create (a list of tasks or a
matrix), read, list, cancel, rerun the failed, and the report.
Bearer = an operator credential; its scope was checked before any handler here runs (app.py)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import limits, shapes
from coordinator.api.auth import access_of
from coordinator.api.bodies import DEFAULT_GOAL_MAX_STEPS, RunCreate
from coordinator.api.context import Context
from coordinator.api.reports import report_json, report_junit, suites
from coordinator.api.responses import json_response, run_detail_view, run_state_view
from coordinator.api.tasks import parse_task, team_for
from coordinator.api.validation import Query, canonical_json, read, require_id
from coordinator.errors import InsufficientScope, found
from coordinator.state.store import LeftOut

_RUN_STATUSES = wire.values(wire.RunStatus)
# What a run's task spec leaves to the run (lua/createRun sets them from the run).
_SET_BY_RUN = ("team", "priority", "idempotency_key", "request_hash")


def _matrix_spec(body: RunCreate, default_queue_timeout_ms: int) -> dict[str, Any]:
    """A matrix as lua/createRun expands it: each work item's task spec, and the selector."""
    matrix = body.matrix
    assert matrix is not None  # RunCreate: a run without tasks has a matrix
    work: list[dict[str, Any]] = []
    for item in matrix.work:
        spec: dict[str, Any] = {"kind": item.kind.value, "max_attempts": matrix.max_attempts,
                                "queue_timeout_ms": (matrix.queue_timeout_s * 1000 if matrix.queue_timeout_s is not None
                                                     else default_queue_timeout_ms)}
        if item.workflow is None:
            spec["goal"] = item.goal
            spec["max_steps"] = item.max_steps if item.max_steps is not None else DEFAULT_GOAL_MAX_STEPS
        else:
            spec["workflow"] = canonical_json({"name": item.workflow.name, "params": item.workflow.params})
            if item.max_steps is not None:
                spec["max_steps"] = item.max_steps
        work.append(spec)
    return {"work": work, "driver": matrix.devices.driver, "labels": canonical_json(matrix.devices.labels)}


def _excluded(left: LeftOut) -> shapes.Excluded:
    excluded = shapes.Excluded(device_id=left.device_id, reason=left.reason)
    if left.work is not None:
        excluded["work"] = left.work
    return excluded


async def create_run(ctx: Context, request: Request) -> Response:
    # A run carries up to wire.MAX_RUN_TASKS task bodies: its body may be that much larger.
    body = await read(request, RunCreate, ctx.settings.max_body_bytes * limits.RUN_BODY_FACTOR)
    operator = access_of(request).operator
    run_hex = secrets.token_hex(12)
    run: dict[str, Any] = {"id": "r_" + run_hex, "name": body.name, "priority": body.priority,
                           "team": team_for(operator, body.team), "created_by": operator.name}
    if operator.token_id is not None:
        run["creator_token"] = operator.token_id
    if body.idempotency_key is not None:
        run["idempotency_key"] = body.idempotency_key
        # What makes two requests "the same" for the key: the body as sent, and who it is for.
        same = canonical_json({"body": body.model_dump(mode="json", exclude_unset=True), "team": run["team"]})
        run["request_hash"] = hashlib.sha256(same.encode()).hexdigest()
    tasks: list[dict[str, Any]] = []
    for task_body in body.tasks or []:
        spec = parse_task(task_body, ctx.settings.queue_timeout_ms)
        tasks.append({k: v for k, v in spec.items() if k not in _SET_BY_RUN})
    matrix = _matrix_spec(body, ctx.settings.queue_timeout_ms) if body.matrix is not None else None
    answer = await ctx.store.create_run({k: v for k, v in run.items() if v is not None}, tasks, matrix,
                                        wire.MAX_RUN_TASKS, actor=operator.actor)
    view = cast("shapes.RunCreated", run_state_view(answer.run, answer.counts))  # its fields beyond are optional
    if matrix is not None:
        # The devices the matrix's selector matched that could not run its work now (PROTOCOL.md,
        # "Runs"), so a person sees why the run has fewer tasks than the pool has phones.
        view["excluded"] = [_excluded(left) for left in answer.excluded]
        view["excluded_count"] = answer.excluded_count
    return json_response(view, 201 if answer.created else 200)


async def get_run(ctx: Context, request: Request) -> Response:
    run_id = require_id(request.path_params["run_id"], "run_id")
    run = found(await ctx.queries.get_run(run_id), "run")
    return json_response(run_detail_view(run.record, run.counts))


async def list_runs(ctx: Context, request: Request) -> Response:
    query = Query(request)
    status = query.choice("status", _RUN_STATUSES)
    team = query.id("team")
    limit = query.limit(*limits.RUNS_LIMIT)
    cursor = query.integer("cursor", default=-1, low=0, high=limits.TASK_CURSOR_MAX)
    page = await ctx.queries.list_runs(status=status, team=team, limit=limit, cursor=None if cursor < 0 else cursor)
    return json_response(shapes.RunPage(runs=[run_state_view(run.record, run.counts) for run in page.items],
                                        next_cursor=page.next_cursor))


async def cancel_run(ctx: Context, request: Request) -> Response:
    access = access_of(request)
    run_id = require_id(request.path_params["run_id"], "run_id")
    # access.owner: a submit-only token, which the script lets cancel only the runs it created.
    state = await ctx.store.cancel_run(run_id, actor=access.operator.actor, owner=access.owner)
    return json_response(run_state_view(state.run, state.counts))


async def rerun_failed(ctx: Context, request: Request) -> Response:
    access = access_of(request)
    run_id = require_id(request.path_params["run_id"], "run_id")
    try:
        created, state = await ctx.store.rerun_failed(run_id, actor=access.operator.actor, owner=access.owner)
    except InsufficientScope:  # a submit-only token, and a run it did not create
        raise InsufficientScope("admin", "without the 'admin' scope, a token may rerun only the runs it "
                                         "created") from None
    return json_response(shapes.RunRerun(run_id=run_id, created=created, run=run_state_view(state.run, state.counts)),
                         201)


async def run_report(ctx: Context, request: Request) -> Response:
    query = Query(request)
    report_format = query.choice("format", ("json", "junit")) or "json"
    run_id = require_id(request.path_params["run_id"], "run_id")
    run = found(await ctx.queries.get_run(run_id), "run")
    tasks = await ctx.queries.run_tasks(run_id)
    artifacts = await ctx.queries.artifact_names([task.id for task in tasks])
    run_suites = suites(tasks, artifacts)
    if report_format == "junit":
        return Response(report_junit(run.record, run_suites), media_type="application/xml")
    return json_response(report_json(run.record, run.counts, run_suites))
