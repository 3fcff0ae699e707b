"""The live feed: one reader of the deployment's event stream per process, fanned out to watchers.

(Stub: the interface the rest of the service uses; the implementation is being written.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from redis.asyncio import Redis


class EventFeed:
    def __init__(self, redis: Redis, stream: str) -> None:
        self._redis = redis
        self._stream = stream
        self.closed = False

    @property
    def watchers(self) -> int:
        """How many watchers of this process follow the feed now."""
        return 0

    def close(self) -> None:
        """The process is told to stop: every watcher's stream ends. Call on the loop's thread."""
        self.closed = True

    async def run(self) -> None:
        """Read the stream until cancelled (started by the app's lifespan)."""

    async def follow(self, last_id: str | None) -> AsyncIterator[tuple[str, bytes]]:
        """(stream id, event JSON) of every event after ``last_id`` still kept, then live ones;
        from now on when ``last_id`` is None."""
        if False:  # pragma: no cover - stub
            yield "", b""
