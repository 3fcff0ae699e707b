"""Webhook delivery: every coordinator process posts the outbox's deliveries to their endpoints.

The scripts that end a task, take a host offline or disable a device append one outbox entry per
webhook that wants the event, in the same step (lua/includes/events.lua). Each process runs one
``WebhookDelivery`` loop, which takes deliveries with lua/takeDeliveries: entries a dead process
held past the visibility timeout (``XAUTOCLAIM``), new entries (``XREADGROUP`` in the one
consumer group, so each entry goes to one process), and retries that are due. For each it posts
``{"id", "type", "created_at", "data"}`` signed with the webhook's secret, and records the
attempt with lua/settleDelivery: delivered on a 2xx (the entry acknowledged), else a retry at an
exponentially growing, jittered delay, until retrying would pass ``retry_for`` after the event
(then ``failed``). A 3xx is a failure: a redirect is never followed, since it could carry the
payload elsewhere.

Isolation: one attempt lasts at most ``attempt_timeout`` (the whole exchange, the answer's body
never read); a process makes at most ``concurrency`` attempts at once and at most
``endpoint_concurrency`` to one webhook, and takes no more deliveries than it can start, so a
hanging endpoint holds a few of its slots and nothing else. A delivery whose endpoint is at its
limit is deferred (due again shortly, no attempt counted), never held waiting: a held delivery
past the visibility timeout would be taken over and made twice. The API's requests never wait
on any of this: the loop shares only the event loop, and each attempt awaits its endpoint.

A failed attempt is logged as one line naming the webhook, the delivery and what went wrong;
never the secret, the body or the URL (a chat service's URL is its credential).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

import wire
from coordinator import __version__
from coordinator.cancellation import cancelling
from coordinator.metrics import Metrics
from coordinator.outage import OutageLog
from coordinator.settings import Settings
from coordinator.state.webhooks import Taken, WebhookStore
from wire import iso_ms

log = logging.getLogger("coordinator.webhooks")

# What a delivery's ``data`` is made from: (event kind, subject id) -> the subject as GET answers
# it. The API floor provides it (coordinator/api/webhooks.py, subject_view).
Render = Callable[[str, str], Awaitable[dict[str, Any]]]


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Tether-Signature`` header of ``body`` sent at ``timestamp`` (unix seconds):
    ``t=<timestamp>,v1=<hex HMAC-SHA256 of "<timestamp>.<body>" keyed with the secret>``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


@dataclass(frozen=True)
class DeliveryPolicy:
    """The delivery's tunables (the COORDINATOR_WEBHOOK_* settings), in seconds."""

    attempt_timeout_s: float = 10.0
    visibility_s: float = 60.0
    concurrency: int = 32
    endpoint_concurrency: int = 4
    retry_base_s: float = 1.0
    retry_max_delay_s: float = 3600.0
    retry_for_s: float = 86400.0
    poll_interval_s: float = 0.5

    @classmethod
    def of(cls, settings: Settings) -> DeliveryPolicy:
        return cls(settings.webhook_attempt_timeout_s, settings.webhook_visibility_s, settings.webhook_concurrency,
                   settings.webhook_endpoint_concurrency, settings.webhook_retry_base_s,
                   settings.webhook_retry_max_delay_s, settings.webhook_retry_for_s, settings.webhook_poll_interval_s)

    def retry_delay_s(self, attempts: int, rng: random.Random) -> float:
        """The wait before the next attempt once ``attempts`` were made: doubling from the base,
        at most the max, then jittered down by up to half, so a fleet's retries spread out."""
        delay: float = min(self.retry_max_delay_s, self.retry_base_s * 2.0 ** min(attempts - 1, 40))
        return delay * rng.uniform(0.5, 1.0)


@dataclass(frozen=True)
class _Outcome:
    delivered: bool
    status: int  # the HTTP status answered; 0 for none
    problem: str  # "" when delivered


class WebhookDelivery:
    """One process's delivery loop (``run``), as its consumer ``consumer`` of the outbox."""

    def __init__(self, store: WebhookStore, render: Render, policy: DeliveryPolicy, metrics: Metrics,
                 consumer: str, *, transport: httpx.AsyncBaseTransport | None = None,
                 rng: random.Random | None = None) -> None:
        self._store = store
        self._render = render
        self._policy = policy
        self._metrics = metrics
        self._consumer = consumer
        self._transport = transport
        self._rng = rng or random.Random()
        self._running: set[asyncio.Task[None]] = set()
        self._per_endpoint: dict[str, int] = {}
        self._slot_freed = asyncio.Event()
        self._outage = OutageLog(log, "webhook delivery")

    @property
    def in_flight(self) -> int:
        return len(self._running)

    async def run(self) -> None:
        """Take and attempt deliveries until cancelled."""
        policy = self._policy
        # The attempt's own timeout bounds the whole exchange; httpx's, each phase of it.
        async with httpx.AsyncClient(
            transport=self._transport, follow_redirects=False, timeout=httpx.Timeout(policy.attempt_timeout_s),
            limits=httpx.Limits(max_connections=policy.concurrency, max_keepalive_connections=policy.concurrency),
            headers={"user-agent": f"tether-webhooks/{__version__}"},
        ) as client:
            try:
                await self._loop(client)
            finally:
                for task in self._running:
                    task.cancel()
                await asyncio.gather(*self._running, return_exceptions=True)

    async def _loop(self, client: httpx.AsyncClient) -> None:
        policy = self._policy
        while True:
            free = policy.concurrency - len(self._running)
            taken: list[Taken] = []
            if free > 0:
                try:
                    taken = await self._store.take(self._consumer, free, int(policy.visibility_s * 1000))
                    self._outage.succeeded()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - keep delivering through Redis hiccups
                    if cancelling():
                        raise asyncio.CancelledError from None
                    self._outage.failed(exc)
            if cancelling():  # a library that swallowed our cancellation (as the reaper guards too)
                raise asyncio.CancelledError
            for delivery in taken:
                self._start(client, delivery)
            if free > 0 and len(taken) == free:
                continue  # a full batch: there may be more
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_freed.wait(), policy.poll_interval_s * self._rng.uniform(0.5, 1.0))
            if cancelling():
                raise asyncio.CancelledError

    def _start(self, client: httpx.AsyncClient, taken: Taken) -> None:
        endpoint = taken.webhook.id
        if self._per_endpoint.get(endpoint, 0) >= self._policy.endpoint_concurrency:
            work = self._defer(taken)
        else:
            self._per_endpoint[endpoint] = self._per_endpoint.get(endpoint, 0) + 1
            work = self._attempt(client, taken)
        task = asyncio.create_task(work, name=f"webhook {taken.delivery.id}")
        self._running.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._slot_freed.set()

    async def _defer(self, taken: Taken) -> None:
        try:
            await self._store.settle(taken, "defer", delay_ms=int(self._policy.retry_base_s * 1000),
                                     retry_for_ms=int(self._policy.retry_for_s * 1000))
        except Exception as exc:  # noqa: BLE001 - the delivery comes back after its visibility timeout
            self._outage.failed(exc)

    async def _attempt(self, client: httpx.AsyncClient, taken: Taken) -> None:
        delivery, policy = taken.delivery, self._policy
        try:
            outcome = await self._post(client, taken)
            attempts = delivery.attempts + 1
            delay_s = 0.0 if outcome.delivered else policy.retry_delay_s(attempts, self._rng)
            state = await self._store.settle(
                taken, "delivered" if outcome.delivered else "retry", status=outcome.status,
                problem=outcome.problem, delay_ms=int(delay_s * 1000), retry_for_ms=int(policy.retry_for_s * 1000))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the delivery comes back after its visibility timeout
            self._outage.failed(exc)
            return
        finally:
            self._per_endpoint[taken.webhook.id] -= 1
            if not self._per_endpoint[taken.webhook.id]:
                del self._per_endpoint[taken.webhook.id]
        self._metrics.webhook_attempts.labels(outcome="delivered" if outcome.delivered else "failed").inc()
        if outcome.delivered:
            self._metrics.webhook_latency.observe(max(0.0, time.time() - delivery.created_at / 1000))
            return
        then = (f"next attempt in {delay_s:.1f} s" if state == wire.DeliveryState.PENDING.value
                else f"delivery {state}")
        log.warning("webhook %s: delivery %s (%s) attempt %d failed: %s; %s", taken.webhook.id, delivery.id,
                    delivery.event, attempts, outcome.problem, then)

    async def _post(self, client: httpx.AsyncClient, taken: Taken) -> _Outcome:
        delivery = taken.delivery
        data = await self._render(delivery.event, delivery.subject)
        body = orjson.dumps({"id": delivery.id, "type": delivery.event, "created_at": iso_ms(delivery.created_at),
                             "data": data})
        headers = {
            "content-type": "application/json",
            wire.WEBHOOK_DELIVERY_HEADER: delivery.id,
            wire.WEBHOOK_SIGNATURE_HEADER: signature(taken.secret, int(time.time()), body),
        }
        try:
            async with asyncio.timeout(self._policy.attempt_timeout_s):
                # Streamed and closed unread: the answer's status is all an attempt needs.
                async with client.stream("POST", taken.webhook.url, content=body, headers=headers) as response:
                    status = response.status_code
        except TimeoutError:
            return _Outcome(False, 0, f"no answer within {self._policy.attempt_timeout_s:g} s")
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return _Outcome(False, 0, type(exc).__name__)
        if 200 <= status < 300:
            return _Outcome(True, status, "")
        if 300 <= status < 400:
            return _Outcome(False, status, f"answered {status}; redirects are not followed")
        return _Outcome(False, status, f"answered {status}")
