"""The feed's test tools, shared by its reader's tests, its route's and the end-to-end one: write
events the way the scripts write them, count and fail the feed's reads, and read an open
GET /api/v1/events stream frame by frame."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support import ADMIN

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}


async def xadd(redis: Any, stream: str, type_: str = "created", maxlen: str = "~ 10000", **ids: Any) -> str:
    """Append one event as the scripts do; its stream id."""
    event = {"type": type_, "at": 1_700_000_000_000, **ids}
    limit = maxlen.split()
    raw = await redis.execute_command("XADD", stream, "MAXLEN", *limit, "*", "e", orjson.dumps(event))
    return raw.decode() if isinstance(raw, bytes) else raw


async def xadd_many(redis: Any, stream: str, count: int, **ids: Any) -> list[str]:
    return [await xadd(redis, stream, task_id=f"t{i}", **ids) for i in range(count)]


class Probe:
    """A client that counts the feed's reads (XREADs running now, at most at once, XRANGEs), and
    whose next ``fail`` XREADs (``fail_ranges`` XRANGEs) raise a connection error, as a Redis
    restart would."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.fail = 0
        self.fail_ranges = 0
        self.failed = asyncio.Event()
        self.reading = 0
        self.most_reading = 0
        self.ranges = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def xread(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            self.fail -= 1
            self.failed.set()
            raise RedisConnectionError("injected")
        self.reading += 1
        self.most_reading = max(self.most_reading, self.reading)
        try:
            return await self._client.xread(*args, **kwargs)
        finally:
            self.reading -= 1

    async def xrange(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_ranges:
            self.fail_ranges -= 1
            raise RedisConnectionError("injected")
        self.ranges += 1
        return await self._client.xrange(*args, **kwargs)


class EventSource:
    """A test's view of one open event stream, read frame by frame."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.opening: dict[str, str] = {}

    async def frame(self, timeout: float = 5.0) -> dict[str, str] | None:
        """The next frame as {field: value} (a comment's field is ""); None at the end."""
        return await asyncio.wait_for(self._frame(), timeout)

    async def _frame(self) -> dict[str, str] | None:
        fields: dict[str, str] = {}
        async for line in self._lines:
            if not line:
                if fields:
                    return fields
                continue
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        return fields or None

    async def event(self) -> tuple[str, dict[str, Any]]:
        """The next event (comments skipped): its id and its JSON."""
        while True:
            frame = await self.frame()
            assert frame is not None, "the stream ended"
            if "id" in frame:
                return frame["id"], orjson.loads(frame["data"])

    async def events(self, count: int) -> list[str]:
        return [(await self.event())[0] for _ in range(count)]


async def open_events(client: httpx.AsyncClient, query: str = "", **headers: str) -> EventSource:
    """An open stream of GET /api/v1/events, its first frame (``retry`` and the starting ``id``,
    no data) read and kept as ``opening``; the caller closes its response."""
    request = client.build_request("GET", f"/api/v1/events{query}", headers={**ADMIN_HEADERS, **headers})
    response = await client.send(request, stream=True)
    source = EventSource(response)
    try:
        assert response.status_code == 200, await response.aread()
        opening = await source.frame()
        assert opening is not None and opening.keys() == {"retry", "id"} and opening["retry"] == "2000"
        source.opening = opening
    except BaseException:
        await response.aclose()
        raise
    return source
