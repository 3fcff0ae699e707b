"""rq: the stock `rq worker` forks a work horse per job; the extra rq-simple column runs the same
jobs in rq's SimpleWorker, in the worker process itself. Every key sits under the run's tag
through RQ_KEY_PREFIX, which rq reads once, when imported: so rq is imported only here, after
setting it, in the bench and in each worker process."""

from __future__ import annotations

import os
import time
from types import ModuleType

from redis import Redis

from bench.peers import REDIS_URL, poll_until


def started_at() -> float:
    return time.time()


def import_rq(tag: str) -> ModuleType:
    os.environ["RQ_KEY_PREFIX"] = f"{tag}:rq"
    import rq  # here, not at the top: only after the prefix is set

    if rq.defaults.RQ_KEY_PREFIX != f"{tag}:rq":
        raise RuntimeError("rq was imported before its key prefix was set; its keys would leak")
    return rq


def queue_name(name: str) -> str:
    return "simple" if name == "rq-simple" else "default"


def work(tag: str, name: str, index: int) -> None:
    rq = import_rq(tag)
    kind = rq.SimpleWorker if name == "rq-simple" else rq.Worker
    kind([queue_name(name)], connection=Redis.from_url(REDIS_URL)).work(logging_level="WARNING")


class RqPeer:
    def __init__(self, tag: str, name: str) -> None:
        self.rq = import_rq(tag)
        # fewer jobs than the other peers: rq runs 100-400 jobs/s, and the run must stay short
        if name == "rq-simple":
            self.workers, self.jobs = "2 × rq SimpleWorker (jobs run in the worker process)", 2_000
        else:
            self.workers, self.jobs = "2 × rq Worker (stock: forks a work horse per job)", 500
        self.redis = Redis.from_url(REDIS_URL)
        self.queue = self.rq.Queue(queue_name(name), connection=self.redis)
        self.parked = self.rq.Queue("parked", connection=self.redis)

    def park(self, n: int) -> None:
        for _ in range(n):
            self.parked.enqueue(started_at)

    def ready_workers(self) -> int:
        return int(self.rq.Worker.count(connection=self.redis, queue=self.queue))

    def run(self, n: int) -> int:
        for _ in range(n):
            self.queue.enqueue(started_at)
        # finished jobs are kept in a sorted set (for result_ttl, 500 s): one ZCARD per poll
        finished = self.queue.finished_job_registry.key
        return poll_until(lambda: self.redis.zcard(finished) >= n)

    def probe(self) -> float:
        sent = time.time()
        result = self.queue.enqueue(started_at).latest_result(timeout=10)  # XREAD, no polling
        assert result is not None
        return (result.return_value - sent) * 1000

    def close(self) -> None:
        self.redis.close()


def make(tag: str, name: str) -> RqPeer:
    return RqPeer(tag, name)
