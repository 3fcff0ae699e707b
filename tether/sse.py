"""Decoding a ``text/event-stream`` body, as the HTML standard says a browser does.

Only what the live feed needs: ``data:`` lines (joined with newlines), ``id:`` (an id-only block
still moves the client's position), ``retry:``, ``event:``; comments (``: keepalive``) and unknown
fields are skipped. A block is dispatched at a blank line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched block. ``data`` is None for a block without data (only ``id:`` or
    ``retry:``): nothing to deliver, but ``id`` and ``retry_ms`` still count."""

    data: str | None
    id: str | None = None
    event: str | None = None
    retry_ms: int | None = None


def decode(lines: Iterable[str]) -> Iterator[ServerSentEvent]:
    """The blocks of a stream given line by line (without line endings)."""
    data: list[str] = []
    event_id: str | None = None
    event: str | None = None
    retry_ms: int | None = None
    for line in lines:
        if not line:
            if data or event_id is not None or retry_ms is not None:
                yield ServerSentEvent("\n".join(data) if data else None, event_id, event, retry_ms)
            data, event_id, event, retry_ms = [], None, None, None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "id" and "\0" not in value:
            event_id = value
        elif name == "event":
            event = value
        elif name == "retry" and value.isdigit():
            retry_ms = int(value)
