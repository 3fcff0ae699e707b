"""celery: Redis as broker and result backend (the usual `celery[redis]` setup). "Two workers" is two
`celery worker --pool=prefork --concurrency=1`: two independent consumers, each running jobs in
one pool process, as close as celery gets to the other peers' two worker processes. Every key
sits under the run's tag through kombu's and the result backend's global_keyprefix."""

from __future__ import annotations

import time

from celery import Celery
from celery.result import ResultSet
from celery.signals import worker_ready
from redis import Redis

from bench.peers import REDIS_URL


def started_at() -> float:
    return time.time()


def make_app(tag: str) -> Celery:
    app = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
    app.conf.update(
        broker_transport_options={"global_keyprefix": f"{tag}:"},
        result_backend_transport_options={"global_keyprefix": f"{tag}:"},
        broker_connection_retry_on_startup=True,  # the default, set only to silence its warning
    )
    app.task(name="started_at")(started_at)
    return app


def work(tag: str, name: str, index: int) -> None:
    def ready(**_: object) -> None:
        Redis.from_url(REDIS_URL).incr(f"{tag}:ready")

    worker_ready.connect(ready, weak=False)
    make_app(tag).worker_main(["worker", "--pool=prefork", "--concurrency=1", "--loglevel=WARNING",
                               "-n", f"w{index}.{tag}@%h"])


class CeleryPeer:
    workers = "2 × celery worker --pool=prefork -c 1 (a consumer + one pool process each)"
    jobs = 5_000
    servers: tuple[int, ...] = ()  # the workers are all there is

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.app = make_app(tag)
        self.task = self.app.tasks["started_at"]
        self.redis = Redis.from_url(REDIS_URL)

    def park(self, n: int) -> None:
        # ignore_result: else the client subscribes to each job's result channel, and that
        # subscription is client memory in Redis, not the queued job's.
        for _ in range(n):
            self.task.apply_async(queue="parked", ignore_result=True)

    def ready_workers(self) -> int:
        return int(self.redis.get(f"{self.tag}:ready") or 0)

    def run(self, n: int) -> int:
        # delay() already subscribed to every result channel (the Redis backend does, so a
        # result can be waited for): joining them reads what is published, no polling.
        results = [self.task.delay() for _ in range(n)]
        ResultSet(results, app=self.app).join_native(timeout=120)
        return 0

    def probe(self) -> float:
        sent = time.time()
        return (self.task.delay().get(timeout=10) - sent) * 1000

    def close(self) -> None:
        self.redis.close()
        self.app.close()


def make(tag: str, name: str) -> CeleryPeer:
    return CeleryPeer(tag)
