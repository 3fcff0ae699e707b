"""saq: asyncio workers (default concurrency, 10 jobs each) that BLMOVE job ids off a Redis list."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from saq import Queue, Worker

from bench.peers import REDIS_URL, LoopThread, bounded, poll_until


async def started_at(ctx: Any) -> float:  # saq's Context: its Worker's type bound refuses dict[str, Any]
    return time.time()


def work(tag: str, name: str, index: int) -> None:
    async def main() -> None:
        await Worker(Queue.from_url(REDIS_URL, name=f"{tag}-saq"), functions=[started_at]).start()

    asyncio.run(main())


class SaqPeer:
    workers = "2 × saq Worker (asyncio, concurrency 10)"
    jobs = 5_000
    servers: tuple[int, ...] = ()  # the workers are all there is

    def __init__(self, tag: str) -> None:
        self.loop = LoopThread()
        self.queue = Queue.from_url(REDIS_URL, name=f"{tag}-saq")
        self.parked = Queue.from_url(REDIS_URL, name=f"{tag}-saq-parked")
        self.loop.run(self.queue.connect())
        self.loop.run(self.parked.connect())

    def park(self, n: int) -> None:
        self.loop.run(bounded([self.parked.enqueue("started_at") for _ in range(n)]))

    def ready_workers(self) -> int:
        return len(self.loop.run(self.queue.info())["workers"])

    def run(self, n: int) -> int:
        self.loop.run(bounded([self.queue.enqueue("started_at") for _ in range(n)]))
        # "incomplete" is a sorted set a job leaves when it finishes: one ZCARD per poll
        return poll_until(lambda: self.loop.run(self.queue.count("incomplete")) == 0)

    def probe(self) -> float:
        async def one() -> float:
            sent = time.time()
            job = await self.queue.enqueue("started_at")
            assert job is not None
            deadline = time.monotonic() + 10
            while not job.completed:
                if time.monotonic() > deadline:
                    raise TimeoutError("saq probe job not done within 10 s")
                # saq reads the job, then subscribes to its updates: a job that completes in
                # between is never announced, and the wait runs out. So wait briefly, then read.
                try:
                    await job.refresh(until_complete=1)
                except TimeoutError:
                    await job.refresh()
            return (job.result - sent) * 1000

        return self.loop.run(one())

    def close(self) -> None:
        self.loop.run(self.queue.disconnect())
        self.loop.run(self.parked.disconnect())
        self.loop.close()


def make(tag: str, name: str) -> SaqPeer:
    return SaqPeer(tag)
