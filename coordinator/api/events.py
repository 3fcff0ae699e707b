"""GET /api/v1/events: the live feed as server-sent events. Bearer = an operator credential with
the ``read`` scope (checked in app.py). Events an operator caused name it as their ``actor`` and
``actor_id``.

The stream opens with ``retry: 2000`` and ``id: <where it starts>`` (an id with no data: a client
that loses the connection before the first event resumes from there, not from "now"); then each
event is ``id: <stream id>`` and ``data: <the
event's JSON>``, and a comment (``: keepalive``) after every ``feed_keepalive_s`` (a setting) of
silence, so proxies keep the connection. A client resumes with ``Last-Event-ID`` (or
``?last_event_id=`` for one that cannot set headers); without either it gets events from now on.
``?task_id=``, ``?host_id=`` and ``?run_id=`` keep only the events that name that task, host or run.
``?tail=N`` (0..100), without a resume id, starts with the deployment's last ``N`` events (before
any filter), so a fresh view opens with what just happened (the dashboard's log).

A ``HEAD`` answers the stream's headers and ends (parameters checked as for ``GET``), with no
watcher. Everything that can fail with a status (credential, parameters, Redis for the starting position)
is checked before the response starts. Once it has started, losing Redis ends the stream with a
comment: the client reconnects after the retry delay and resumes from its last event.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Mapping

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from coordinator.api.context import Context
from coordinator.api.validation import require_id
from coordinator.errors import InvalidRequest, redis_unavailable
from coordinator.feed import Entry, EventFeed, Notice, StreamId

log = logging.getLogger("coordinator.feed")

RETRY_MS = 2000
FILTERS = ("task_id", "host_id", "run_id")
TAIL_MAX = 100
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def events(ctx: Context, request: Request) -> Response:
    last_id = _last_event_id(request)
    match = _filters(request)
    tail = _tail(request)
    if request.method == "HEAD":
        # The stream's head alone: a stream that is never sent would never end, keeping the
        # connection (and its pipelined requests) and a watcher counted until the client left.
        return Response(media_type="text/event-stream", headers=_HEADERS)
    if last_id is None and tail:
        last_id = await ctx.feed.tail_id(tail)
    if last_id is None:
        last_id = await ctx.feed.latest_id()  # "now" is when the request came, not when it streams
    return EventStream(_stream(ctx.feed, last_id, match, ctx.settings.feed_keepalive_s))


def _last_event_id(request: Request) -> str | None:
    # The header wins: EventSource reconnects to the same URL, with the id of its last event.
    value = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if not value:
        return None
    try:
        return str(StreamId.parse(value))
    except ValueError:
        raise InvalidRequest("Last-Event-ID must be a stream id, <ms>-<seq>") from None


def _tail(request: Request) -> int:
    text = request.query_params.get("tail")
    if text is None:
        return 0
    if not text.isdigit() or int(text) > TAIL_MAX:
        raise InvalidRequest(f"tail must be an integer 0..{TAIL_MAX}")
    return int(text)


def _filters(request: Request) -> dict[str, str]:
    params = request.query_params
    return {name: require_id(params[name], name) for name in FILTERS if name in params}


async def _stream(feed: EventFeed, last_id: str, match: Mapping[str, str],
                  keepalive_s: float) -> AsyncGenerator[bytes, None]:
    yield b"retry: %d\nid: %s\n\n" % (RETRY_MS, last_id.encode())
    items = feed.follow(last_id, match=match or None, keepalive_s=keepalive_s)
    async with contextlib.aclosing(items):
        try:
            async for item in items:
                yield _frame(item) if isinstance(item, Entry) else _comment(item)
        except Exception as exc:
            if not redis_unavailable(exc):
                raise
            log.warning("event feed watcher lost Redis (%s); its stream ends", type(exc).__name__)
            yield _comment(Notice("the feed lost Redis; reconnect to resume"))


def _frame(entry: Entry) -> bytes:
    # A JSON text has no raw line breaks; should one ever come, each line gets its own data field
    # (the client joins them with "\n"), so it cannot end the event early.
    data = b"".join(b"data: " + line + b"\n" for line in entry.data.splitlines() or [b""])
    return b"id: " + entry.id.encode() + b"\n" + data + b"\n"


def _comment(notice: Notice) -> bytes:
    return b": " + " ".join(notice.text.split()).encode() + b"\n\n"


class EventStream(StreamingResponse):
    """``text/event-stream`` that closes its generator however the response ends.

    When the client hangs up, Starlette cancels the task sending the response; if the generator
    was suspended at a ``yield`` just then, nothing else closes it until the garbage collector
    does, and its watcher would be counted (and woken) until then.
    """

    def __init__(self, content: AsyncGenerator[bytes, None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=_HEADERS)
        self._content = content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._content.aclose()
