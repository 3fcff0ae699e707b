"""Artifacts over HTTP: a host's upload (``PUT /internal/v1/hosts/{host_id}/leases/{lease_id}/
artifacts/{name}``) and the operators' reads (``GET /api/v1/tasks/{task_id}/artifacts`` and
``.../artifacts/{name}?attempt=N``). What they rest on: coordinator/blobs/artifacts.py.

The upload: the credential and the path's host first, then everything but the body (name,
Content-Type, query, a declared length over the cap), then lua/admitArtifact (a read): the lease
current, the name not described yet, the task's caps against the declared length. Then the body
streams to a temporary name of the blob store, one script records the description, and only
then do the bytes become the blob; a refusal or a hang-up deletes the temporary at once, so
nothing refused stays (PROTOCOL.md, Conventions). Under a name already described the body is only
hashed, never stored: the record then answers the replay (200) or the conflict (409). The
answer is the description's view: 201 when stored, 200 for the same bytes again.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

import wire
from coordinator.api import shapes
from coordinator.api.context import Context
from coordinator.api.responses import json_response
from coordinator.api.validation import require_id
from coordinator.blobs.folder import BlobMissing, BlobTooLarge, namespace_of, spool
from coordinator.errors import (
    ApiError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ScriptError,
    error_for,
    found,
)
from coordinator.state.records import HostPrincipal
from coordinator.state.store import ArtifactRecorded
from wire import iso_ms

_NAME = re.compile(wire.ARTIFACT_NAME_PATTERN)
_IMAGE = "image/"
_MAX_INDEX = 2**31 - 1


@dataclass(frozen=True)
class Upload:
    lease_id: str
    task_id: str
    attempt: int
    name: str
    content_type: str
    step_index: int | None


def _name(request: Request) -> str:
    name: str = request.path_params["name"]
    if not _NAME.fullmatch(name):
        raise InvalidRequest("an artifact name is 1..128 characters of A-Z, a-z, 0-9, '.', '_' and '-'")
    return name


def _content_type(request: Request) -> str:
    """The media type, without parameters (``text/plain; charset=utf-8`` is ``text/plain``)."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type not in wire.ARTIFACT_CONTENT_TYPES:
        raise InvalidRequest(f"Content-Type must be one of {', '.join(wire.ARTIFACT_CONTENT_TYPES)}")
    return media_type


def _index(raw: str | None, name: str, low: int) -> int | None:
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= _MAX_INDEX:
        raise InvalidRequest(f"{name} must be an integer in [{low}, {_MAX_INDEX}]")
    return int(raw)


async def _parse_upload(ctx: Context, request: Request) -> Upload:
    lease_id = require_id(request.path_params["lease_id"], "lease_id")
    name = _name(request)
    content_type = _content_type(request)
    query = request.query_params
    task_id = require_id(query.get("task_id"), "task_id")
    attempt = _index(query.get("attempt"), "attempt", 1)
    if attempt is None:
        raise InvalidRequest("attempt is required")
    step_index = _index(query.get("step_index"), "step_index", 0)
    declared = _declared(request)
    if declared is not None and declared > ctx.settings.max_artifact_bytes:
        raise PayloadTooLarge(f"an artifact is at most {ctx.settings.max_artifact_bytes} bytes")
    return Upload(lease_id, task_id, attempt, name, content_type, step_index)


def artifact_view(description: dict[str, Any]) -> shapes.Artifact:
    """What the contract shows of a description (never its blob key)."""
    return {
        "name": description["name"],
        "attempt": description["attempt"],
        "step_index": description.get("step_index"),
        "size": description["size"],
        "sha256": description["sha256"],
        "content_type": description["content_type"],
        "created_at": iso_ms(description["created_at"]),
    }


def _too_large(settings_max: int, limit: int) -> ApiError:
    """The refusal of a body that passed ``limit``: the artifact's own cap (413), else the task's
    (its room was smaller)."""
    if limit >= settings_max:
        return PayloadTooLarge(f"an artifact is at most {settings_max} bytes")
    return error_for(ScriptError.ARTIFACT_LIMIT)


async def _store(ctx: Context, principal: HostPrincipal, upload: Upload,
                 request: Request) -> tuple[dict[str, Any], bool]:
    """The body staged, its description recorded, then the bytes made the blob: (description,
    whether it replayed an earlier upload)."""
    settings = ctx.settings
    admitted = await ctx.auth.run_for(principal, ctx.store.admit_artifact(
        principal, upload.lease_id, upload.task_id, upload.attempt, upload.name, declared=_declared(request),
        max_task_bytes=settings.max_task_artifact_bytes, max_task_artifacts=settings.max_task_artifacts,
    ))
    namespace = namespace_of(upload.task_id)
    earlier = admitted.earlier
    with ctx.artifacts.upload_slot():
        if earlier is not None and await ctx.artifacts.exists(earlier["blob"]):
            # A replay or a conflict, which the bytes' hash decides: none is stored.
            limit = settings.max_artifact_bytes
            try:
                sha256, size = await spool(request.stream(), None, limit)
            except BlobTooLarge:
                raise _too_large(settings.max_artifact_bytes, limit) from None
            recorded = await _record(ctx, principal, upload, size, sha256, f"{namespace}/{sha256}")
            return recorded.description, recorded.replayed
        # New bytes, or a replay whose blob is missing (a store that failed after the record):
        # staged, and the blob only once the record accepts them.
        limit = settings.max_artifact_bytes if earlier is not None else min(settings.max_artifact_bytes, admitted.room)
        try:
            staged = await ctx.artifacts.stage(namespace, request.stream(), limit)
        except BlobTooLarge:
            raise _too_large(settings.max_artifact_bytes, limit) from None
        try:
            blob = staged.blob
            recorded = await _record(ctx, principal, upload, blob.size, blob.sha256, blob.key)
            await ctx.artifacts.commit(staged)
        finally:
            await staged.discard()  # refused, or gone: nothing stays (after a commit, nothing to do)
        if recorded.freed:  # a live session's oldest screens, dropped to make room for this one
            with contextlib.suppress(ApiError):  # the store failing: the orphan sweep deletes them later
                await ctx.artifacts.delete(list(recorded.freed))
    return recorded.description, recorded.replayed


def _declared(request: Request) -> int | None:
    declared = request.headers.get("content-length")
    return int(declared) if declared is not None and declared.isascii() and declared.isdigit() else None


async def _record(ctx: Context, principal: HostPrincipal, upload: Upload, size: int, sha256: str,
                  blob: str) -> ArtifactRecorded:
    settings = ctx.settings
    return await ctx.auth.run_for(principal, ctx.store.record_artifact(
        principal, upload.lease_id, upload.task_id, upload.attempt, upload.name,
        size=size, sha256=sha256, content_type=upload.content_type, step_index=upload.step_index,
        blob=blob, max_task_bytes=settings.max_task_artifact_bytes,
        max_task_artifacts=settings.max_task_artifacts,
    ))


async def upload(ctx: Context, request: Request) -> Response:
    principal = await ctx.auth.host_for_path(request, request.path_params["host_id"])
    try:
        parsed = await ctx.auth.parse_for(principal, _parse_upload(ctx, request))
        description, replayed = await _store(ctx, principal, parsed, request)
    except ApiError as exc:
        ctx.metrics.artifact_uploads.labels(exc.code).inc()
        raise
    except ClientDisconnect:  # the agent went away mid-body: nothing stays, the boundary counts it
        ctx.metrics.artifact_uploads.labels("disconnected").inc()
        raise
    ctx.metrics.artifact_uploads.labels("replayed" if replayed else "stored").inc()
    stored = shapes.ArtifactStored(name=description["name"], size=description["size"], sha256=description["sha256"],
                                   content_type=description["content_type"], step_index=description.get("step_index"))
    return json_response(stored, 200 if replayed else 201)


# -- operators' reads ----------------------------------------------------------------------


async def list_artifacts(ctx: Context, request: Request) -> Response:
    task_id = require_id(request.path_params["task_id"], "task_id")
    artifacts = found(await ctx.queries.task_artifacts(task_id), "task")
    return json_response(shapes.Artifacts(artifacts=[artifact_view(a) for a in artifacts]))


# Served bytes are the hosts' and never trusted: no sniffing, no script, no plugin, and a
# download rather than a page unless it is an image (which a browser only draws).
_SAFE_HEADERS = {"x-content-type-options": "nosniff", "content-security-policy": "sandbox",
                 "cache-control": "private, max-age=3600"}


async def get_artifact(ctx: Context, request: Request) -> Response:
    task_id = require_id(request.path_params["task_id"], "task_id")
    name = _name(request)
    attempt = _index(request.query_params.get("attempt"), "attempt", 1)
    description = found(await ctx.queries.task_artifact(task_id, name, attempt), "artifact")
    content_type = description["content_type"]
    headers = {**_SAFE_HEADERS, "content-length": str(description["size"])}
    if not content_type.startswith(_IMAGE):
        headers["content-disposition"] = f'attachment; filename="{name}"'  # the name's grammar needs no quoting
    if request.method == "HEAD":  # the head alone: the blob is not read
        return Response(b"", media_type=content_type, headers=headers)
    try:
        chunks = await ctx.artifacts.open(description["blob"])
    except BlobMissing:
        raise NotFound("no such artifact") from None
    return StreamingResponse(chunks, media_type=content_type, headers=headers)
