"""What the API answers of live sessions (PROTOCOL.md, "Live sessions"): a session's state in
its task, the host's commands poll, a command with its answer, and the recording."""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from coordinator.api.shapes.common import Id, Time


class SessionState(TypedDict):
    """A session's settings and state in its task (responses.py ``session_view``)."""

    idle_timeout_s: int
    max_duration_s: int
    idle_deadline: Time | None  # while running
    max_deadline: Time | None  # while running
    end_requested: bool
    end_reason: str | None


class SessionSettings(TypedDict):
    """A session assignment's bounds (the claim's answer, ``session``)."""

    idle_timeout_s: int
    max_duration_s: int


class PolledCommand(TypedDict):
    command_id: Id
    action: dict[str, Any]


class CommandsPolled(TypedDict):
    commands: list[PolledCommand]  # at most one: commands run one at a time, in order
    lease_ttl_ms: int
    lease_expires_at: Time
    cancel_requested: bool
    end_requested: bool
    end_reason: str | None  # why the session is asked to end (ended, idle_timeout, max_duration)


class CommandObservation(TypedDict):
    screen: str | None  # the screen artifact's name
    screen_url: str | None  # where an operator reads it
    width: int | None
    height: int | None
    elements: list[dict[str, Any]]
    elements_truncated: NotRequired[bool]  # the host's answer was cut to its bound


class Command(TypedDict):
    """A command: ``{"command_id", "status": "pending"}`` until answered; in the recording and
    once answered, who sent what when and the host's answer."""

    command_id: Id
    status: Literal["pending", "done", "failed"]
    action: NotRequired[dict[str, Any]]
    actor: NotRequired[str | None]
    sent_at: NotRequired[Time | None]
    answered_at: NotRequired[Time | None]
    error: NotRequired[str | None]
    duration_ms: NotRequired[int | None]
    round_trip_ms: NotRequired[int]
    observation: NotRequired[CommandObservation | None]


class Commands(TypedDict):
    commands: list[Command]  # oldest first
    next_cursor: int | None
