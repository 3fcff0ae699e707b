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
``endpoint_concurrency`` to one webhook, and takes no more deliveries than it has attempt slots
free, so a hanging endpoint holds a few of its slots and nothing else. A delivery whose endpoint
has no free slot waits for one in the process (a few per slot, and only as long as its
visibility timeout leaves room for its attempt after: past it, another process would take it over
and make it twice); beyond that it is deferred, due again after about as long as the endpoint's
oldest attempt has run (no attempt counted), so a fast endpoint's burst goes out at once and a
hanging endpoint's backlog is looked at seldom. The API's requests never wait on any of this: the
loop shares only the event loop, and each attempt awaits its endpoint.

A failed attempt is logged as one line naming the webhook, the delivery and what went wrong;
never the secret, the body or the URL (a chat service's URL is its credential).
"""

from __future__ import annotations

import asyncio
import contextlib
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
from wire.signatures import signature

log = logging.getLogger("coordinator.webhooks")

# What a delivery's ``data`` is made from: (event kind, subject id) -> the subject as GET answers
# it. The API floor provides it (coordinator/api/webhooks.py, subject_view).
Render = Callable[[str, str], Awaitable[dict[str, Any]]]


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


# A stopped process stays a consumer of the outbox's group: forgotten once idle this long with
# nothing pending, looked for this often by each process. (Forgetting a live one that is merely
# idle costs nothing: it holds nothing, and its next read makes it a consumer again.)
FORGET_CONSUMER_AFTER_S = 3600.0
FORGET_EVERY_S = 300.0

# A delivery whose endpoint has all its attempts in flight waits in the process for one of
# them, up to this many per attempt slot; more are deferred (back to Redis, due again later).
WAITING_PER_SLOT = 4


class _Endpoint:
    """One webhook's share of this process: its attempt slots, who waits for one, and since when
    its oldest attempt in flight has run (how slow it is now)."""

    def __init__(self, slots: int) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.assigned = 0  # deliveries attempted or waiting for a slot
        self.started: dict[int, float] = {}  # attempt -> its start (monotonic)

    def slowness_s(self) -> float:
        """How long its oldest attempt in flight has run (0 with none)."""
        return time.monotonic() - min(self.started.values()) if self.started else 0.0


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
        self._tasks: set[asyncio.Task[None]] = set()
        self._attempting = 0  # attempts in flight: what the process's concurrency bounds
        self._endpoints: dict[str, _Endpoint] = {}
        self._slot_freed = asyncio.Event()
        self._outage = OutageLog(log, "webhook delivery")
        # How long a delivery may wait in the process for its endpoint: it and its attempt must
        # end within the visibility timeout, or another process would take it over.
        self._hold_s = max(0.0, policy.visibility_s - 2 * policy.attempt_timeout_s)

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
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self, client: httpx.AsyncClient) -> None:
        policy = self._policy
        forget_at = time.monotonic() + FORGET_EVERY_S * self._rng.uniform(0.1, 1.0)
        forget_idle_ms = int(max(FORGET_CONSUMER_AFTER_S, 10 * policy.visibility_s) * 1000)
        while True:
            free = policy.concurrency - self._attempting
            taken: list[Taken] = []
            if free > 0:
                forget = time.monotonic() >= forget_at
                try:
                    taken = await self._store.take(self._consumer, free, int(policy.visibility_s * 1000),
                                                   forget_idle_ms if forget else 0)
                    if forget:
                        forget_at = time.monotonic() + FORGET_EVERY_S
                    self._outage.succeeded()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - keep delivering through Redis hiccups
                    if cancelling():
                        raise asyncio.CancelledError from None
                    self._outage.failed(exc)
            if cancelling():  # a library that swallowed our cancellation (as the reaper guards too)
                raise asyncio.CancelledError
            started = sum([self._start(client, delivery) for delivery in taken])
            if free > 0 and len(taken) == free and started:
                continue  # a full batch that went out: there may be more
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_freed.wait(), policy.poll_interval_s * self._rng.uniform(0.5, 1.0))
            if cancelling():
                raise asyncio.CancelledError

    def _start(self, client: httpx.AsyncClient, taken: Taken) -> bool:
        """Attempt ``taken`` now, or once its endpoint has a free slot; or, with too many waiting
        for that endpoint already, defer it. Whether it was not deferred."""
        endpoint = self._endpoints.get(taken.webhook.id)
        if endpoint is None:
            endpoint = self._endpoints[taken.webhook.id] = _Endpoint(self._policy.endpoint_concurrency)
        slots = self._policy.endpoint_concurrency
        room = slots + (WAITING_PER_SLOT * slots if self._hold_s > 0 else 0)
        going = endpoint.assigned < room
        if going:
            endpoint.assigned += 1
        work = self._attempt(client, taken, endpoint) if going else self._defer(taken, endpoint)
        task = asyncio.create_task(work, name=f"webhook {taken.delivery.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return going

    def _release(self, webhook_id: str, endpoint: _Endpoint) -> None:
        if not endpoint.assigned:
            self._endpoints.pop(webhook_id, None)

    async def _defer(self, taken: Taken, endpoint: _Endpoint) -> None:
        # Due again once its endpoint may have a free slot: about as long as its oldest attempt
        # has run so far (a fast endpoint's at the next poll, a hanging one's within half an
        # attempt's timeout), doubled for each time it was put off before and jittered, so a
        # hanging endpoint's backlog is looked at ever more seldom rather than churned.
        policy = self._policy
        first_s = min(policy.attempt_timeout_s / 2, max(policy.poll_interval_s, endpoint.slowness_s()))
        delay_s = min(policy.retry_max_delay_s, first_s * 2.0 ** min(taken.delivery.deferrals, 30))
        try:
            await self._store.settle(taken, "defer", delay_ms=int(delay_s * self._rng.uniform(0.5, 1.0) * 1000),
                                     retry_for_ms=int(policy.retry_for_s * 1000))
        except Exception as exc:  # noqa: BLE001 - the delivery comes back after its visibility timeout
            self._outage.failed(exc)
        finally:
            self._release(taken.webhook.id, endpoint)

    async def _attempt(self, client: httpx.AsyncClient, taken: Taken, endpoint: _Endpoint) -> None:
        try:
            async with asyncio.timeout(self._hold_s):
                await endpoint.slots.acquire()
        except TimeoutError:
            endpoint.assigned -= 1
            await self._defer(taken, endpoint)
            return
        except asyncio.CancelledError:
            endpoint.assigned -= 1
            raise
        self._attempting += 1
        key = id(taken)
        endpoint.started[key] = time.monotonic()
        try:
            await self._attempt_now(client, taken)
        finally:
            del endpoint.started[key]
            endpoint.slots.release()
            endpoint.assigned -= 1
            self._attempting -= 1
            self._slot_freed.set()
            self._release(taken.webhook.id, endpoint)

    async def _attempt_now(self, client: httpx.AsyncClient, taken: Taken) -> None:
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
