"""A tool's answer as MCP carries it: text for the model, the same as JSON for a program, and a
command's observation (its screen scaled, its elements one line each)."""
from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any

from mcp_types import CallToolResult, ContentBlock, ImageContent, TextContent

import wire
from coordinator.api.context import Context
from coordinator.blobs.folder import BlobMissing
from coordinator.mcp import screens

Content = list[ContentBlock]


def text(value: str) -> TextContent:
    return TextContent(type="text", text=value)


def answer(content: Content, structured: Mapping[str, Any] | None = None) -> CallToolResult:
    """A tool's answer: ``content`` for the model, and the same as JSON (``structured``) for a
    program, which the text then also carries, as the protocol asks of structured answers."""
    if structured is None:
        return CallToolResult(content=content)
    return CallToolResult(content=[*content, text(json_text(structured))], structured_content=dict(structured))


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _screen_png(ctx: Context, task_id: str, name: str) -> bytes | None:
    """The bytes of the screen an answer names; None when it is gone (the session's oldest
    screens make room for new ones)."""
    # A session has one attempt: its artifact is one hash field, however long the recording.
    description = await ctx.queries.task_artifact(task_id, name, 1)
    if description is None:
        return None
    try:
        chunks = await ctx.artifacts.open(description["blob"])
    except BlobMissing:
        return None
    return b"".join([chunk async for chunk in chunks])


async def observation_content(ctx: Context, task_id: str, reply: Mapping[str, Any]) -> CallToolResult:
    """A command's answer as the model reads it: a line on what happened, the screen as an
    image (scaled, with its scale), and the elements, one line each; the answer as JSON for a
    program (``screen_scale`` added when there is a screen)."""
    status = reply.get("status")
    head = f"command {reply.get('command_id')} {status}"
    if reply.get("error"):
        head += f": {reply['error']}"
    content: Content = [text(head)]
    structured = dict(reply)
    observation = reply.get("observation")
    if not isinstance(observation, Mapping):
        return CallToolResult(content=content, structured_content=structured)
    name = observation.get("screen")
    raw = await _screen_png(ctx, task_id, name) if wire.is_valid_id(name) else None
    # Decoding and scaling a phone's screen takes a while: not on the event loop every request shares.
    screen = await asyncio.to_thread(screens.scaled, raw) if raw is not None else None
    if screen is not None:
        structured["screen_scale"] = screen.scale
        content.append(text(screen.caption()))
        content.append(ImageContent(type="image", data=_base64(screen.png), mime_type="image/png"))
    else:
        content.append(text(f"no screen this time; the device's screen is {observation.get('width')}x"
                            f"{observation.get('height')} px"))
    elements = observation.get("elements")
    content.append(text("elements ([index] text id bounds flags; tap one with element=index):\n"
                        + screens.elements_text(elements if isinstance(elements, list) else [])))
    return CallToolResult(content=content, structured_content=structured)


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
