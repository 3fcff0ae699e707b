"""The scripts of live sessions (lua/includes/sessions.lua): a command sent, awaited, polled for
by the host, a session ended; a part of ``Store``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from coordinator.state.records import (
    Actor,
    HostPrincipal,
    TaskRecord,
)
from coordinator.state.script_calls import ScriptCalls, text


@dataclass(frozen=True)
class CommandsPolled:
    """A session's host poll, answered: the lease's new expiry (ms), whether the task was
    cancelled or asked to end (and why: the host reports it as ``metadata.end_reason``), and the
    next commands ([{command_id, action (JSON text)}])."""

    lease_expires_at_ms: int
    cancel_requested: bool
    end_requested: bool
    commands: list[dict[str, Any]]
    end_reason: str | None = None


class SessionScripts(ScriptCalls):
    """The live sessions' part of ``Store`` (lua/includes/sessions.lua)."""

    async def send_command(self, task_id: str, command_id: str, action_json: str, action_kind: str, *,
                           actor: Actor, owner: str | None, process_id: str = "", wait_ms: int = 0) -> dict[str, Any]:
        """Queue a command for a running session; ``owner``: the token it must have been created
        by (None: any, an admin's). A request that will wait ``wait_ms`` for the answer is
        registered on ``process_id`` in the same step. The command's record."""
        reply = await self._run("sendCommand", [task_id, command_id, action_json, action_kind, actor.name,
                                                     actor.id, owner or "", process_id, wait_ms])
        command: dict[str, Any] = orjson.loads(reply[1])
        return command

    async def await_command(self, task_id: str, command_id: str, process_id: str = "",
                            wait_ms: int = 0) -> tuple[dict[str, Any], str, bool]:
        """One command's record, its session's status, and whether the session has ended; a
        pending command's wait is registered on ``process_id`` in the same step."""
        reply = await self._run("awaitCommand", [task_id, command_id, process_id, wait_ms])
        command: dict[str, Any] = orjson.loads(reply[1])
        return command, text(reply[2]), reply[3] == 1

    async def poll_commands(self, host: HostPrincipal, lease_id: str, task_id: str, attempt: int, ttl_ms: int,
                            answers_json: str, process_id: str = "", wait_ms: int = 0) -> CommandsPolled:
        """A session's host poll: answers recorded, the lease renewed, the next command."""
        reply = await self._run("pollCommands", [host.host_id, lease_id, task_id, attempt, host.digest,
                                                      ttl_ms, answers_json, process_id, wait_ms])
        return CommandsPolled(int(reply[1]), reply[2] == 1, reply[3] == 1, orjson.loads(reply[4]),
                              text(reply[5]) or None)

    async def end_session(self, task_id: str, *, actor: Actor, owner: str | None) -> TaskRecord:
        reply = await self._run("endSession", [task_id, actor.name, actor.id, owner or ""])
        return TaskRecord.from_json(reply[1])
