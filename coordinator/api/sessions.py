"""Live sessions, the operator's side (PROTOCOL.md, "Live sessions"): send a command, read one,
end the session, read its recording. Plain async functions taking ``(ctx, operator, task_id,
...)`` and returning the answer, raising coordinator/errors.py exceptions; the Starlette routes
around them (and MCP's tools) only translate."""

from __future__ import annotations

from typing import Any

from coordinator.api.auth import Operator
from coordinator.api.context import Context


async def send_command(ctx: Context, operator: Operator, task_id: str, action: dict[str, Any],
                       wait_s: float) -> tuple[int, dict[str, Any]]:
    """Queue ``action`` for the session ``task_id`` and wait up to ``wait_s`` for its answer:
    ``(200, answer)`` once the host answered, else ``(202, {"command_id", "status": "pending"})``."""
    raise NotImplementedError


async def get_command(ctx: Context, operator: Operator, task_id: str, command_id: str,
                      wait_s: float) -> tuple[int, dict[str, Any]]:
    """One command of the session and its answer, waiting up to ``wait_s`` for it like ``send_command``."""
    raise NotImplementedError


async def end_session(ctx: Context, operator: Operator, task_id: str) -> dict[str, Any]:
    """End the session (idempotent): the host is told (``end_requested``); the task's view."""
    raise NotImplementedError


async def session_log(ctx: Context, operator: Operator, task_id: str, limit: int,
                      cursor: int | None) -> dict[str, Any]:
    """The session's recording, oldest first: ``{"commands": [...], "next_cursor"}``."""
    raise NotImplementedError
