"""Wakes waiting long-polls when work is assigned to their host, from any coordinator process.

Every script that queues an assignment publishes the host id on one channel, in the same atomic
step. Each process holds one subscription and a table of its own waiting polls; a message sets
the events of that host's polls, which then run the claim script again. So the Redis connections
a process holds do not grow with the number of waiting polls (one subscription, plus the shared
command pool).

No wake-up is lost: a poll registers its event before its first claim attempt, and the
subscription is live before any poll is accepted, so an assignment queued after the claim script
saw an empty queue is always published to a registered event. Spurious wake-ups are harmless
(the claim script decides). If the subscription drops, every waiting poll is woken on
reconnection, since messages may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import random

from redis.asyncio import Redis

from coordinator.cancellation import cancelling

log = logging.getLogger("coordinator.waiter")



class ClaimWaiter:
    def __init__(self, redis: Redis, channel: str) -> None:
        self._redis = redis
        self._channel = channel
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._count = 0
        self._ready = asyncio.Event()
        self.closed = False

    def close(self) -> None:
        """The process is told to stop: every waiting poll, and every poll that arrives from now
        on, answers 204 at once. Call on the event loop's thread."""
        self.closed = True
        self.wake_all()

    @property
    def waiting(self) -> int:
        """How many polls of this process wait right now."""
        return self._count

    def register(self, host_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._waiting.setdefault(host_id, set()).add(event)
        self._count += 1
        return event

    def unregister(self, host_id: str, event: asyncio.Event) -> None:
        events = self._waiting.get(host_id)
        if events is None or event not in events:
            return
        events.discard(event)
        self._count -= 1
        if not events:
            del self._waiting[host_id]

    def wake(self, host_id: str) -> None:
        for event in self._waiting.get(host_id, ()):
            event.set()

    def wake_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def run(self) -> None:
        """Listen until cancelled; reconnect with jittered backoff after any Redis failure."""
        delay = 0.1
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                self._ready.set()
                self.wake_all()
                delay = 0.1
                while True:
                    if cancelling():
                        raise asyncio.CancelledError
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None and message["type"] == "message":
                        data = message["data"]
                        self.wake(data.decode() if isinstance(data, bytes) else data)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any Redis failure: resubscribe
                if cancelling():
                    raise asyncio.CancelledError from None
                log.warning("wake-up subscription lost (%s); reconnecting", type(exc).__name__)
                await asyncio.sleep(random.uniform(0, delay))
                delay = min(delay * 2, 5.0)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:  # noqa: BLE001 - the connection is already broken
                    pass
