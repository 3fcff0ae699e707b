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
payload elsewhere. Every connection goes through ``webhook_targets.GuardedNetwork``, which
connects only to addresses COORDINATOR_WEBHOOK_ALLOW_NETWORKS allows (checked at each delivery,
not only at registration).

Isolation (a dead endpoint never slows another; PROTOCOL.md, "Webhooks"):
- one attempt lasts at most ``attempt_timeout`` (the whole exchange, the answer's body never
  read); at most ``endpoint_concurrency`` attempts to one webhook are in flight at once;
- the process's ``concurrency`` slots bound the attempts that are *young*: an attempt that has
  not been answered within ``slow_after`` gives its process slot back (it keeps its endpoint's).
  So however many endpoints hang, each holds the shared slots for a fraction of a second per
  attempt, and a healthy endpoint's delivery is taken and started within about ``slow_after``
  of the loop seeing it. What hanging attempts hold is bounded by the endpoints' own slots
  (``wire.WEBHOOKS_MAX`` x ``endpoint_concurrency`` connections at most);
- a circuit per endpoint (``webhook_endpoints.Circuit``): after ``circuit_timeouts`` attempts
  in a row time out, its deliveries are deferred without an attempt for ``circuit_open``,
  doubling each time it opens again, at most ``retry_max_delay``; then one attempt (the probe)
  decides: an answer, whatever its status, closes it, a timeout opens it again. A dead endpoint
  is then tried once a while, not with every delivery;
- a delivery whose endpoint has no free slot waits for one in the process (a few per slot, and
  only as long as its visibility timeout leaves room for its attempt after: past it, another
  process would take it over and make it twice); beyond that it is deferred, due again after
  about as long as the endpoint's oldest attempt has run (no attempt counted). The API's requests
  never wait on any of this: the loop shares only the event loop, and each attempt awaits its
  endpoint.

A failed attempt is logged as one line naming the webhook, the delivery and what went wrong;
never the secret, the body or the URL (a chat service's URL is its credential). What went wrong
is also the delivery's ``last_error``, in a few plain categories (``timeout``, ``refused``,
``TLS``, ``HTTP <status>``) that never tell an open port of something else from a closed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
import orjson

import wire
from coordinator import __version__
from coordinator.cancellation import cancelling
from coordinator.metrics import Metrics
from coordinator.outage import OutageLog
from coordinator.state.webhooks import Taken, WebhookStore
from coordinator.webhook_endpoints import Circuit, DeliveryPolicy, Endpoint
from coordinator.webhook_targets import GuardedNetwork, TargetRefused, Unresolved
from wire import iso_ms
from wire.signatures import signature

log = logging.getLogger("coordinator.webhooks")

# What a delivery's ``data`` is made from: (event kind, subject id) -> the subject as GET answers
# it. The API floor provides it (coordinator/api/webhooks.py, subject_view).
Render = Callable[[str, str], Awaitable[dict[str, Any]]]


# What went wrong with an attempt, as its delivery's ``last_error`` and its log line says it: a
# category first, then a few plain words. A connection refused, reset or closed and an answer
# that is not HTTP read alike, so a webhook aimed at a port tells nothing of what listens there.
TIMEOUT = "timeout"
REFUSED = "refused"
TLS = "TLS"
HTTP = "HTTP"
_NO_HTTP_ANSWER = f"{REFUSED}: no HTTP answer (connection refused, reset or closed, or not HTTP)"


@dataclass(frozen=True)
class _Outcome:
    delivered: bool
    status: int  # the HTTP status answered; 0 for none
    problem: str  # "" when delivered: the category, then words

    @property
    def timed_out(self) -> bool:
        return self.problem.startswith(TIMEOUT)


def _problem(exc: Exception) -> str:
    """The category and words of an attempt that got no HTTP status."""
    if isinstance(exc, TargetRefused):
        return f"{REFUSED}: the host resolves to an address not allowed (COORDINATOR_WEBHOOK_ALLOW_NETWORKS)"
    if isinstance(exc, Unresolved):
        return f"{REFUSED}: the host name does not resolve"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):  # a TLS server answered, and was not trusted
            return f"{TLS}: the server's certificate was not accepted"
        cause = cause.__cause__ or cause.__context__
    return _NO_HTTP_ANSWER


# A stopped process stays a consumer of the outbox's group: forgotten once idle this long with
# nothing pending, looked for this often by each process. (Forgetting a live one that is merely
# idle costs nothing: it holds nothing, and its next read makes it a consumer again.)
FORGET_CONSUMER_AFTER_S = 3600.0
FORGET_EVERY_S = 300.0

# A delivery whose endpoint has all its attempts in flight waits in the process for one of
# them, up to this many per attempt slot; more are deferred (back to Redis, due again later).
WAITING_PER_SLOT = 4


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The process's trust for webhook endpoints, made once: loading the CA bundle costs some
    40 ms, which every in-process coordinator would pay again (the tests build thousands). A
    context is safe to share between pools; its trust comes from the process's environment."""
    return httpx.create_ssl_context()


class WebhookDelivery:
    """One process's delivery loop (``run``), as its consumer ``consumer`` of the outbox.
    ``network``: where connections are made (tests); by default the system's, through the
    policy's ``GuardedNetwork``."""

    def __init__(self, store: WebhookStore, render: Render, policy: DeliveryPolicy, metrics: Metrics,
                 consumer: str, *, network: httpcore.AsyncNetworkBackend | None = None,
                 rng: random.Random | None = None) -> None:
        self._store = store
        self._render = render
        self._policy = policy
        self._metrics = metrics
        self._consumer = consumer
        self._network = GuardedNetwork(policy.targets, network)
        self._rng = rng or random.Random()
        self._tasks: set[asyncio.Task[None]] = set()
        self._attempting = 0  # young attempts in flight: what the process's concurrency bounds
        self._endpoints: dict[str, Endpoint] = {}
        self._circuits: dict[str, Circuit] = {}
        self._slot_freed = asyncio.Event()
        self._outage = OutageLog(log, "webhook delivery")
        # How long a delivery may wait in the process for its endpoint: it and its attempt must
        # end within the visibility timeout, or another process would take it over.
        self._hold_s = max(0.0, policy.visibility_s - 2 * policy.attempt_timeout_s)

    async def run(self) -> None:
        """Take and attempt deliveries until cancelled."""
        policy = self._policy
        # httpcore's pool, not httpx's client: its network backend is where each connection's
        # address is checked. Its bound is a backstop; ours are the slots (young attempts, and
        # each endpoint's).
        pool = httpcore.AsyncConnectionPool(
            ssl_context=_tls_context(), network_backend=self._network,
            max_connections=policy.concurrency + wire.WEBHOOKS_MAX * policy.endpoint_concurrency,
            max_keepalive_connections=policy.concurrency)
        async with pool:
            try:
                await self._loop(pool)
            finally:
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self, pool: httpcore.AsyncConnectionPool) -> None:
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
            started = sum([self._start(pool, delivery) for delivery in taken])
            if free > 0 and len(taken) == free and started:
                continue  # a full batch that went out: there may be more
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_freed.wait(), policy.poll_interval_s * self._rng.uniform(0.5, 1.0))
            if cancelling():
                raise asyncio.CancelledError

    def _circuit(self, webhook_id: str) -> Circuit:
        circuit = self._circuits.get(webhook_id)
        if circuit is None:
            circuit = self._circuits[webhook_id] = Circuit()
        return circuit

    def _start(self, pool: httpcore.AsyncConnectionPool, taken: Taken) -> bool:
        """Attempt ``taken`` now, or once its endpoint has a free slot; or, with its circuit open
        or too many waiting for that endpoint already, defer it. Whether it was not deferred."""
        endpoint = self._endpoints.get(taken.webhook.id)
        if endpoint is None:
            endpoint = self._endpoints[taken.webhook.id] = Endpoint(self._policy.endpoint_concurrency)
        circuit = self._circuits.get(taken.webhook.id)
        open_s = circuit.open_for_s(time.monotonic()) if circuit is not None else 0.0
        slots = self._policy.endpoint_concurrency
        room = slots + (WAITING_PER_SLOT * slots if self._hold_s > 0 else 0)
        going = not open_s and endpoint.assigned < room
        if going:
            endpoint.assigned += 1
        work = (self._attempt(pool, taken, endpoint) if going
                else self._defer(taken, endpoint, open_s or None))
        task = asyncio.create_task(work, name=f"webhook {taken.delivery.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return going

    def _release(self, webhook_id: str, endpoint: Endpoint) -> None:
        """Forget what the process holds of an endpoint with nothing in flight: its slots, and its
        circuit when that is closed with no timeout counted."""
        if not endpoint.assigned:
            self._endpoints.pop(webhook_id, None)
            circuit = self._circuits.get(webhook_id)
            if circuit is not None and circuit.idle:
                del self._circuits[webhook_id]

    async def _defer(self, taken: Taken, endpoint: Endpoint, until_s: float | None = None) -> None:
        # Due again once its endpoint may have a free slot: about as long as its oldest attempt
        # has run so far (a fast endpoint's at the next poll, a hanging one's within half an
        # attempt's timeout), doubled for each time it was put off before and jittered, so a
        # hanging endpoint's backlog is looked at ever more seldom rather than churned. With
        # ``until_s`` (its circuit is open): just after the circuit lets an attempt through.
        policy = self._policy
        if until_s is None:
            first_s = min(policy.attempt_timeout_s / 2, max(policy.poll_interval_s, endpoint.slowness_s()))
            delay_s = min(policy.retry_max_delay_s, first_s * 2.0 ** min(taken.delivery.deferrals, 30))
            delay_s *= self._rng.uniform(0.5, 1.0)
        else:
            delay_s = until_s + policy.poll_interval_s * self._rng.uniform(0.0, 2.0)
        try:
            await self._store.settle(taken, "defer", delay_ms=int(delay_s * 1000),
                                     retry_for_ms=int(policy.retry_for_s * 1000))
        except Exception as exc:  # noqa: BLE001 - the delivery comes back after its visibility timeout
            self._outage.failed(exc)
        finally:
            self._release(taken.webhook.id, endpoint)

    async def _attempt(self, pool: httpcore.AsyncConnectionPool, taken: Taken, endpoint: Endpoint) -> None:
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
        circuit = self._circuit(taken.webhook.id)
        closed_in_s, probe = circuit.admit(time.monotonic(), self._policy)
        if closed_in_s > 0:  # its circuit is open (or its probe is out): no attempt, no slot held
            endpoint.slots.release()
            endpoint.assigned -= 1
            await self._defer(taken, endpoint, closed_in_s)
            return
        self._attempting += 1
        young = True

        def grown_slow() -> None:  # unanswered for slow_after: the process slot goes back
            nonlocal young
            if young:
                young = False
                self._attempting -= 1
                self._slot_freed.set()

        timer = asyncio.get_running_loop().call_later(self._policy.slow_after_s, grown_slow)
        key = id(taken)
        endpoint.started[key] = time.monotonic()
        timed_out: bool | None = None
        try:
            timed_out = await self._attempt_now(pool, taken)
        finally:
            timer.cancel()
            grown_slow()
            del endpoint.started[key]
            self._ended(taken, circuit, timed_out, probe)
            endpoint.slots.release()
            endpoint.assigned -= 1
            self._release(taken.webhook.id, endpoint)

    def _ended(self, taken: Taken, circuit: Circuit, timed_out: bool | None, probe: bool) -> None:
        was_open = circuit.opened
        open_s = circuit.ended(timed_out, probe, time.monotonic(), self._policy)
        if open_s:
            why = "its probe timed out" if was_open else f"{self._policy.circuit_timeouts} attempts in a row timed out"
            log.warning("webhook %s: %s; its deliveries wait %.1f s for the next try", taken.webhook.id, why, open_s)
        elif was_open and not circuit.opened:
            log.info("webhook %s answers again; its deliveries resume", taken.webhook.id)

    async def _attempt_now(self, pool: httpcore.AsyncConnectionPool, taken: Taken) -> bool | None:
        """Make the attempt and record it; whether it timed out (None: it was not made)."""
        delivery, policy = taken.delivery, self._policy
        try:
            outcome = await self._post(pool, taken)
            attempts = delivery.attempts + 1
            delay_s = 0.0 if outcome.delivered else policy.retry_delay_s(attempts, self._rng)
            state = await self._store.settle(
                taken, "delivered" if outcome.delivered else "retry", status=outcome.status,
                problem=outcome.problem, delay_ms=int(delay_s * 1000), retry_for_ms=int(policy.retry_for_s * 1000))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the delivery comes back after its visibility timeout
            self._outage.failed(exc)
            return None
        self._metrics.webhook_attempts.labels(outcome="delivered" if outcome.delivered else "failed").inc()
        if outcome.delivered:
            self._metrics.webhook_latency.observe(max(0.0, time.time() - delivery.created_at / 1000))
            return False
        then = (f"next attempt in {delay_s:.1f} s" if state == wire.DeliveryState.PENDING.value
                else f"delivery {state}")
        log.warning("webhook %s: delivery %s (%s) attempt %d failed: %s; %s", taken.webhook.id, delivery.id,
                    delivery.event, attempts, outcome.problem, then)
        return outcome.timed_out

    async def _post(self, pool: httpcore.AsyncConnectionPool, taken: Taken) -> _Outcome:
        delivery, timeout_s = taken.delivery, self._policy.attempt_timeout_s
        data = await self._render(delivery.event, delivery.subject)
        body = orjson.dumps({"id": delivery.id, "type": delivery.event, "created_at": iso_ms(delivery.created_at),
                             "data": data})
        headers = [
            (b"content-type", b"application/json"),
            (b"user-agent", f"tether-webhooks/{__version__}".encode()),
            (wire.WEBHOOK_DELIVERY_HEADER.encode(), delivery.id.encode()),
            (wire.WEBHOOK_SIGNATURE_HEADER.encode(), signature(taken.secret, int(time.time()), body).encode()),
        ]
        phases = {"connect": timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
        try:
            async with asyncio.timeout(timeout_s):
                # Streamed and closed unread: the answer's status is all an attempt needs.
                async with pool.stream("POST", taken.webhook.url, headers=headers, content=body,
                                       extensions={"timeout": phases}) as response:
                    status = response.status
        except (TimeoutError, httpcore.TimeoutException):
            return _Outcome(False, 0, f"{TIMEOUT}: no answer within {timeout_s:g} s")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, ssl.SSLError,
                OSError) as exc:
            return _Outcome(False, 0, _problem(exc))
        if 200 <= status < 300:
            return _Outcome(True, status, "")
        if 300 <= status < 400:
            return _Outcome(False, status, f"{HTTP} {status}: redirects are not followed")
        return _Outcome(False, status, f"{HTTP} {status}")
