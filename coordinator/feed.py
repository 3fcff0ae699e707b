"""The live feed: one reader of the deployment's event stream per process, fanned out to watchers.

The scripts append every event to one capped Redis stream (``XADD <feed> MAXLEN ~ 10000 * e
<json>``). A process does not give each watcher a Redis connection: one reader loop (``run``)
blocks on the stream with ``XREAD BLOCK`` through the shared pool, holding one of its connections
for at most ``block_s`` at a time, and keeps the newest entries it read in a bounded in-memory
buffer. Watchers (``follow``) are woken by an event each time the buffer grows and read it from
their own position, so a new event costs one Redis read whatever the number of watchers.

A watcher whose position is older than the buffer reaches back (it resumed with an old
``Last-Event-ID``, or its client read too slowly) catches up from Redis on its own, with short
bounded ``XRANGE`` reads through the pool, until the buffer covers its position again. Events
the stream no longer keeps are gone: such a watcher is told with a ``Notice`` and continues from
the oldest kept. What a watcher holds is bounded (one catch-up batch, or one copy of the buffer's
references), and it waits for its client between events, so a slow client slows only itself.

The buffer always holds every entry with an id in ``(floor, last]`` (``last`` being where the
reader is), which is all a watcher needs to decide, without Redis, whether it may read from
memory. With no watchers the reader idles without touching Redis and forgets its buffer; the next
watcher makes it start again from the stream's newest entry (watchers behind that catch up from
Redis). After a Redis failure it retries with jittered backoff (a second at most,
``outage.Backoff``) from the last id it read, so watchers miss nothing the stream still keeps.

Each entry is decoded once, when read, and its ``at`` (the scripts write the epoch milliseconds
of Redis's clock) is rewritten as the contract's RFC 3339 UTC string with milliseconds, so every
watcher gets timestamps in the one format the API uses; the names of the hosts and devices it
names are added then too (``annotate``), once per batch read, not once per watcher.

fakeredis (the embedded default) implements ``XREAD BLOCK`` on asyncio without blocking the
event loop, so the same code serves it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import re
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import orjson
from redis.asyncio import Redis

from coordinator.cancellation import cancelling
from coordinator.outage import Backoff, OutageLog
from wire import iso_ms

log = logging.getLogger("coordinator.feed")

BUFFER_SIZE = 1024  # entries kept in memory for watchers to read
# Adds fields to a batch of events, in place (EventFeed's ``annotate``).
Annotate = Callable[[list[dict[str, Any]]], Awaitable[object]]
# How long one XREAD holds its pooled connection waiting for events: well under the pool's
# socket timeout, and the longest the reader keeps reading once nobody watches.
BLOCK_S = 2.0
READ_COUNT = 256  # at most this many entries per XREAD
CATCH_UP_COUNT = 100  # at most this many entries per catch-up XRANGE
_MAX_PART = 2**64 - 1
_STREAM_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")


class StreamId(NamedTuple):
    """A Redis stream entry id, ``<ms>-<seq>``; ordered as the stream orders its entries."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> StreamId:
        """``<ms>-<seq>`` or ``<ms>`` (as ``<ms>-0``); ``ValueError`` for anything else."""
        match = _STREAM_ID.fullmatch(text)
        if match is None:
            raise ValueError(f"not a stream id: {text!r}")
        ms, seq = int(match[1]), int(match[2] or 0)
        if ms > _MAX_PART or seq > _MAX_PART:
            raise ValueError(f"stream id out of range: {text!r}")
        return cls(ms, seq)

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


ZERO = StreamId(0, 0)  # before every entry: following from it delivers everything kept


class Entry(NamedTuple):
    """One event for a watcher: its stream id and its JSON object, as the script wrote it."""

    id: str
    data: bytes


class Notice(NamedTuple):
    """Not an event, but something to tell the watcher's client: events were lost to it, or
    nothing happened for a while (a keepalive)."""

    text: str


KEEPALIVE = Notice("keepalive")


@dataclass(frozen=True, slots=True)
class _Kept:
    """A stream entry, decoded once for every watcher: ``event`` is None when the entry is not a
    JSON object (skipped, but still a position in the stream)."""

    id: StreamId
    entry: Entry
    event: dict[str, Any] | None

    def matches(self, match: Mapping[str, str] | None) -> bool:
        if self.event is None:
            return False
        return match is None or all(self.event.get(k) == v for k, v in match.items())


class EventFeed:
    """The feed of one process: ``run`` is its reader, each ``follow`` a watcher."""

    def __init__(self, redis: Redis, stream: str, *, buffer_size: int = BUFFER_SIZE,
                 block_s: float = BLOCK_S, annotate: Annotate | None = None) -> None:
        """``annotate`` adds fields to a batch of events in place before any watcher sees them
        (the app's: ``host_name``, ``device_name``)."""
        self._redis = redis
        self._annotate = annotate
        self._stream = stream
        self._buffer_size = buffer_size
        self._block_ms = max(1, int(block_s * 1000))
        self._buffer: deque[_Kept] = deque()
        self._floor: StreamId | None = None  # None: the reader is idle and the buffer empty
        self._last: StreamId | None = None
        self._news = asyncio.Event()  # set (and replaced) whenever the buffer grows, or on close
        self._watched = asyncio.Event()  # set when a watcher arrives: the idle reader starts
        self._count = 0
        self.closed = False

    @property
    def watchers(self) -> int:
        """How many watchers of this process follow the feed now."""
        return self._count

    def close(self) -> None:
        """The process is told to stop: every watcher's stream ends, and new ones end at once.
        Call on the loop's thread."""
        self.closed = True
        self._notify()

    async def tail_id(self, count: int) -> str:
        """Where to follow from to get the last ``count`` events kept first (``0-0`` when fewer
        are kept): one ``XREVRANGE`` of ``count + 1`` entries."""
        entries = _range(await self._redis.xrevrange(self._stream, "+", "-", count=count + 1))
        return _text(entries[-1][0]) if len(entries) > count else str(ZERO)

    async def latest_id(self) -> str:
        """The id of the newest event kept (``0-0`` when none): following from it yields only
        events from now."""
        return str(await self._newest())

    # -- the reader ------------------------------------------------------------------------

    async def run(self) -> None:
        """Read the stream until cancelled (started by the app's lifespan). Idle, touching no
        Redis, while nobody watches; after a Redis failure, again from the last id read, with
        jittered backoff."""
        backoff = Backoff()  # capped short: watchers hear nothing until the reader reads again
        outage = OutageLog(log, "event feed reader")
        while True:
            if cancelling():  # a Redis call below may have swallowed the cancellation
                raise asyncio.CancelledError
            await self._until_watched()
            try:
                await self._read()
                backoff.reset()
                outage.succeeded()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any Redis failure: read again later
                if cancelling():
                    raise asyncio.CancelledError from None
                outage.failed(exc)
                await asyncio.sleep(backoff.next_delay())

    async def _until_watched(self) -> None:
        """Return once someone watches. Idle, the buffer is dropped: nobody reads it, and
        keeping it current would cost a Redis read every ``block_s`` for nothing."""
        while self._count == 0:
            self._buffer.clear()
            self._floor = self._last = None
            self._watched.clear()
            await self._watched.wait()

    async def _read(self) -> None:
        """One blocking read from where the reader is, into the buffer."""
        if self._last is None:  # starting: the buffer covers what comes after the newest entry
            self._floor = self._last = await self._newest()
            self._notify()
            if cancelling():  # swallowed by the call above; do not block for nothing
                raise asyncio.CancelledError
        reply = await self._redis.xread({self._stream: str(self._last)}, count=READ_COUNT,
                                        block=self._block_ms)
        kept = await self._decode(_entries(reply))
        for item in kept:
            if item.event is None:
                log.warning("feed entry %s is not a JSON object in field e; skipped", item.id)
            self._append(item)
        if kept:
            self._notify()

    def _append(self, item: _Kept) -> None:
        self._buffer.append(item)
        self._last = item.id
        if len(self._buffer) > self._buffer_size:
            self._floor = self._buffer.popleft().id

    def _notify(self) -> None:
        self._news.set()
        self._news = asyncio.Event()

    # -- watchers ----------------------------------------------------------------------------

    async def follow(self, last_id: str | None, *, match: Mapping[str, str] | None = None,
                     keepalive_s: float | None = None) -> AsyncGenerator[Entry | Notice, None]:
        """Every event after ``last_id`` still kept, in stream order, then live ones; from now on
        when ``last_id`` is None. Only events whose JSON has every field of ``match`` equal to
        its value; ``KEEPALIVE`` after ``keepalive_s`` without anything to yield. A ``Notice``
        says when events after the watcher's position were dropped from the stream before it
        read them. Ends when the feed is closed. ``ValueError`` for a malformed ``last_id``;
        Redis errors of the catch-up reads are raised (the client may resume)."""
        if self.closed:
            return
        position = StreamId.parse(last_id) if last_id is not None else await self._newest()
        self._register()
        try:
            async with contextlib.aclosing(self._deliver(position, match, keepalive_s)) as items:
                async for item in items:
                    yield item
        finally:
            self._count -= 1

    def _register(self) -> None:
        self._count += 1
        self._watched.set()

    async def _deliver(self, position: StreamId, match: Mapping[str, str] | None,
                       keepalive_s: float | None) -> AsyncGenerator[Entry | Notice, None]:
        """``follow`` from ``position``: from the buffer when it reaches back that far, else
        from Redis, one batch at a time; waiting for news when there is nothing more."""
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()  # when the watcher was last sent anything
        behind = False  # catching up from Redis (told of any gap when it started)
        while not self.closed:
            news = self._news  # taken before looking, so nothing appended after is missed
            if self._covers(position):
                behind = False
                batch = self._buffered_after(position)
            elif self._floor is None:  # the reader is starting: it tells where its buffer begins
                batch = []
            else:
                notice = None if behind else await self._gap(position)
                behind = True
                if notice is not None:
                    yield notice
                    quiet_since = loop.time()
                batch = await self._range_after(position)
            for item in batch:
                position = item.id
                if item.matches(match):
                    yield item.entry
                    quiet_since = loop.time()
                    if self.closed:
                        return
            if batch:
                continue
            deadline = None if keepalive_s is None else quiet_since + keepalive_s
            if not await _wait(news, deadline):
                yield KEEPALIVE
                quiet_since = loop.time()

    def _covers(self, position: StreamId) -> bool:
        return self._floor is not None and position >= self._floor

    def _buffered_after(self, position: StreamId) -> list[_Kept]:
        """The buffered entries after ``position`` (a copy: the buffer moves while the watcher
        waits for its client)."""
        start = bisect.bisect_right(self._buffer, position, key=lambda item: item.id)
        return [self._buffer[i] for i in range(start, len(self._buffer))]

    async def _range_after(self, position: StreamId) -> list[_Kept]:
        entries = _range(await self._redis.xrange(self._stream, f"({position}", "+", count=CATCH_UP_COUNT))
        return await self._decode(entries)

    async def _decode(self, entries: Iterable[tuple[Any, Any]]) -> list[_Kept]:
        """Entries decoded once for every watcher: ``at`` in the contract's format, and what
        ``annotate`` adds (the names of hosts and devices), for a whole batch at once."""
        parsed = [_parse(raw_id, fields) for raw_id, fields in entries]
        events = [event for _, event in parsed if event is not None]
        if self._annotate is not None and events:
            await self._annotate(events)
        return [_kept(stream_id, event) for stream_id, event in parsed]

    async def _gap(self, position: StreamId) -> Notice | None:
        """A notice when the stream no longer keeps the events just after ``position``: it is
        older than the oldest entry kept (bar ``0-0``, which asks for everything kept)."""
        if position == ZERO:
            return None
        oldest = _range(await self._redis.xrange(self._stream, "-", "+", count=1))
        if not oldest or StreamId.parse(_text(oldest[0][0])) <= position:
            return None
        return Notice(f"events after {position} were dropped from the feed before they could be "
                      f"sent; continuing from the oldest kept, {_text(oldest[0][0])}")

    async def _newest(self) -> StreamId:
        newest = _range(await self._redis.xrevrange(self._stream, "+", "-", count=1))
        return StreamId.parse(_text(newest[0][0])) if newest else ZERO


async def _wait(news: asyncio.Event, deadline: float | None) -> bool:
    """Wait until ``news`` is set (True) or the loop's clock reaches ``deadline`` (False)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(deadline):
            await news.wait()
            return True
    return False


def _entries(reply: Any) -> list[tuple[Any, Any]]:
    """The (id, fields) pairs of an XREAD reply of one stream: a list of [name, entries] (RESP2),
    a map of name to entries (RESP3), or None when the block timed out."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else [entries for _, entries in reply]
    return [tuple(entry) for entries in streams for entry in entries]


def _range(reply: object) -> list[tuple[bytes | str, dict[Any, Any]]]:
    """XRANGE's or XREVRANGE's entries. redis-py types them as XCLAIM's, whose id and fields may
    be None (an entry deleted meanwhile); a range never answers one."""
    return cast(list[tuple[bytes | str, dict[Any, Any]]], reply)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _parse(raw_id: bytes | str, fields: Mapping[Any, Any]) -> tuple[StreamId, dict[str, Any] | None]:
    """An entry's id and event (None when it is not a JSON object), its ``at`` in the
    contract's format."""
    stream_id = StreamId.parse(_text(raw_id))
    raw = fields.get(b"e", fields.get("e"))
    data = raw.encode() if isinstance(raw, str) else raw
    event: Any = None
    if isinstance(data, bytes):
        with contextlib.suppress(orjson.JSONDecodeError):
            event = orjson.loads(data)
    if not isinstance(event, dict):
        return stream_id, None
    at = event.get("at")
    if isinstance(at, int) and not isinstance(at, bool):
        event["at"] = iso_ms(at)
    return stream_id, event


def _kept(stream_id: StreamId, event: dict[str, Any] | None) -> _Kept:
    data = b"" if event is None else orjson.dumps(event)
    return _Kept(stream_id, Entry(str(stream_id), data), event)
