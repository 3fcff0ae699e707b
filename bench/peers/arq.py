"""arq: asyncio workers (default max_jobs 10). Stock arq does not block on Redis for new work: each
worker polls its queue's sorted set every poll_delay, 0.5 s by default, which sets its idle
dispatch; reported as is. Job ids start with the run's tag, since arq's job keys (arq:job:ID,
arq:result:ID) do not carry the queue name."""

from __future__ import annotations

import asyncio
import inspect
import random
import time
import uuid
from collections.abc import Coroutine
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker

from bench.peers import REDIS_URL, LoopThread, bounded, poll_until

POLL_DELAY = float(inspect.signature(Worker).parameters["poll_delay"].default)  # left as is: 0.5 s


async def started_at(ctx: dict[str, Any]) -> float:
    return time.time()


def work(tag: str, name: str, index: int) -> None:
    async def ready(ctx: dict[str, Any]) -> None:
        await ctx["redis"].incr(f"{tag}:ready")

    Worker(functions=[started_at], queue_name=f"{tag}:arq:queue", on_startup=ready,
           redis_settings=RedisSettings.from_dsn(REDIS_URL)).run()


class ArqPeer:
    workers = f"2 × arq Worker (asyncio, max_jobs 10, polls every {POLL_DELAY} s)"
    jobs = 2_000  # arq is poll-bound: fewer jobs keep the run short

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.queue = f"{tag}:arq:queue"
        self.loop = LoopThread()
        self.pool = self.loop.run(create_pool(RedisSettings.from_dsn(REDIS_URL), default_queue_name=self.queue))

    def _enqueue(self, queue: str | None = None) -> Coroutine[Any, Any, Any]:
        job_id = self.tag + uuid.uuid4().hex[len(self.tag):]  # as long as arq's own uuid4().hex
        return self.pool.enqueue_job("started_at", _job_id=job_id, _queue_name=queue)

    def park(self, n: int) -> None:
        self.loop.run(bounded([self._enqueue(f"{self.tag}:arq:parked") for _ in range(n)]))

    def ready_workers(self) -> int:
        return int(self.loop.run(self.pool.get(f"{self.tag}:ready")) or 0)

    def run(self, n: int) -> int:
        self.loop.run(bounded([self._enqueue() for _ in range(n)]))
        # a job leaves the queue's sorted set when it finishes: one ZCARD per poll
        return poll_until(lambda: self.loop.run(self.pool.zcard(self.queue)) == 0)

    def probe(self) -> float:
        async def one() -> float:
            # Start at a random point of the workers' poll cycle: back to back, each probe
            # would start just after the poll that ran the last one, and always wait ~0.5 s.
            await asyncio.sleep(random.uniform(0, POLL_DELAY))
            sent = time.time()
            job = await self._enqueue()
            # not job.result(): it reads the result and the queue apart, so a job finishing in
            # between reads as lost (ResultNotFound)
            while (info := await job.result_info()) is None:
                await asyncio.sleep(0.002)
            return (info.result - sent) * 1000

        return self.loop.run(one())

    def close(self) -> None:
        self.loop.run(self.pool.aclose())
        self.loop.close()


def make(tag: str, name: str) -> ArqPeer:
    return ArqPeer(tag)
