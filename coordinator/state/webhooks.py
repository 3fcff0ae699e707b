"""Webhooks in Redis: registering and removing them (admin), the deliveries a process takes and
settles (coordinator/webhooks.py delivers them), and the reads of both. Every change is one
script of lua/; the scripts that end a task or take a host offline append to the outbox
themselves (lua/includes/events.lua), so delivery starts from what Redis already holds.

A webhook's secret is kept apart from its record (``webhook_secrets``): the records, which the
listing reads, never hold it, and only ``take`` hands it out, to sign with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

import wire
from coordinator.clock import ShiftedClock
from coordinator.errors import error_for
from coordinator.state.scripts import NO_WAIT, Deployment, Durability, Script
from coordinator.transport.base import RedisTransport

# The one consumer group every coordinator process reads the outbox in.
OUTBOX_GROUP = "delivery"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Webhook:
    """A registered endpoint (never its secret)."""

    id: str
    url: str
    events: list[str]
    team: str | None
    created_at: int  # ms
    created_by: str

    @classmethod
    def from_json(cls, raw: bytes | str) -> Webhook:
        d = orjson.loads(raw)
        return cls(d["id"], d["url"], list(d["events"]), d.get("team"), int(d["created_at"]),
                   d.get("created_by", wire.BOOTSTRAP_ACTOR))


@dataclass(frozen=True)
class Delivery:
    """One event to one webhook, and how its attempts went."""

    id: str
    webhook_id: str
    event: str
    subject: str  # the task, run, host or device the event is about
    created_at: int  # ms: when the event happened
    attempts: int
    state: str  # a wire.DeliveryState value
    last_status: int | None = None
    last_error: str | None = None
    last_attempt_at: int | None = None
    next_attempt_at: int | None = None
    delivered_at: int | None = None
    deferrals: int = 0  # times it was put off because its endpoint had no free slot

    @classmethod
    def from_json(cls, raw: bytes | str) -> Delivery:
        d = orjson.loads(raw)
        return cls(d["id"], d["webhook_id"], d["event"], d["subject"], int(d["created_at"]), int(d["attempts"]),
                   d["state"], d.get("last_status"), d.get("last_error"), d.get("last_attempt_at"),
                   d.get("next_attempt_at"), d.get("delivered_at"), int(d.get("deferrals", 0)))


@dataclass(frozen=True)
class Taken:
    """A delivery a process holds, with what it needs to make the attempt. ``entry``: its outbox
    entry ("" when it was taken as a retry). The secret never appears in the repr."""

    delivery: Delivery
    entry: str
    webhook: Webhook
    secret: str

    def __repr__(self) -> str:
        return f"Taken(delivery={self.delivery.id!r}, webhook={self.webhook.id!r}, entry={self.entry!r})"


class WebhookStore:
    def __init__(self, redis: RedisTransport, deployment: Deployment, scripts: dict[str, Script],
                 durability: Durability = NO_WAIT, clock: ShiftedClock | None = None) -> None:
        """``deployment``: what every script takes first (the store's, ``Store.deployment``)."""
        self.transport = redis
        self.redis = redis.client
        self.deployment = deployment
        self.keys = deployment.keys
        self.durability = durability
        self.clock = clock if clock is not None else ShiftedClock()
        self._scripts = scripts

    async def _run(self, name: str, args: list[Any], durability: Durability | None = None) -> list[Any]:
        reply: list[Any] = await self._scripts[name](
            self.transport, self.deployment, args, self.durability if durability is None else durability,
            self.clock.offset_ms)
        if reply[0] != 0:
            raise error_for(reply[0])
        return reply

    # -- the admin's changes ---------------------------------------------------------------

    async def create(self, webhook_id: str, url: str, events: list[str], team: str | None, secret: str, *,
                     actor: str = wire.BOOTSTRAP_ACTOR) -> Webhook:
        """``Conflict(webhook_limit)`` when the deployment holds ``wire.WEBHOOKS_MAX`` already."""
        body: dict[str, Any] = {"url": url, "events": events}
        if team is not None:
            body["team"] = team
        reply = await self._run("createWebhook",
                                [webhook_id, orjson.dumps(body), secret, wire.WEBHOOKS_MAX, actor, OUTBOX_GROUP])
        return Webhook.from_json(reply[1])

    async def delete(self, webhook_id: str) -> Webhook:
        """``NotFound`` when there is no such webhook."""
        reply = await self._run("deleteWebhook", [webhook_id])
        return Webhook.from_json(reply[1])

    # -- reads -----------------------------------------------------------------------------

    async def all(self) -> list[Webhook]:
        """Every webhook (at most ``wire.WEBHOOKS_MAX``), oldest first."""
        raw = await self.redis.hvals(self.keys.webhooks)
        return sorted((Webhook.from_json(v) for v in raw), key=lambda w: (w.created_at, w.id))

    async def get(self, webhook_id: str) -> Webhook | None:
        raw = await self.redis.hget(self.keys.webhooks, webhook_id)
        return None if raw is None else Webhook.from_json(raw)

    async def deliveries(self, webhook_id: str, limit: int) -> list[Delivery]:
        """The webhook's latest deliveries, newest first (at most ``limit``)."""
        ids = await self.redis.zrevrange(self.keys.webhook_recent(webhook_id), 0, limit - 1)
        if not ids:
            return []
        raw = await self.redis.hmget(self.keys.webhook_deliveries, ids)
        return [Delivery.from_json(v) for v in raw if v is not None]

    async def backlog(self) -> tuple[int, int]:
        """Deliveries in the outbox (not attempted yet, or held by a process), and those waiting
        for a retry (held ones included): the deployment's figures for /metrics."""
        async with self.transport.pipeline() as pipe:
            pipe.xlen(self.keys.webhook_outbox)
            pipe.zcard(self.keys.webhook_retries)
            outbox, retries = await pipe.execute()
        return int(outbox), int(retries)

    # -- delivery (coordinator/webhooks.py) ------------------------------------------------

    async def take(self, consumer: str, limit: int, visibility_ms: int, forget_idle_ms: int = 0) -> list[Taken]:
        """Up to ``limit`` deliveries for this process to attempt now, each held for
        ``visibility_ms`` (lua/takeDeliveries); with ``forget_idle_ms``, the consumers of
        stopped processes idle that long with nothing pending are forgotten first. Never waits for
        replicas: a hold a failover loses only lets a delivery be attempted twice, which receivers
        dedupe."""
        reply = await self._run(
            "takeDeliveries",
            [OUTBOX_GROUP, consumer, limit, visibility_ms, wire.WEBHOOK_DELIVERIES_KEPT, forget_idle_ms],
            NO_WAIT)
        return [Taken(Delivery.from_json(reply[i]), _text(reply[i + 1]), Webhook.from_json(reply[i + 2]),
                      _text(reply[i + 3]))
                for i in range(1, len(reply), 4)]

    async def settle(self, taken: Taken, outcome: str, *, status: int = 0, problem: str = "",
                     delay_ms: int = 0, retry_for_ms: int = 0) -> str:
        """Record an attempt (``outcome`` "delivered" or "retry") or a deferral ("defer"); the
        delivery's state after it (lua/settleDelivery)."""
        reply = await self._run(
            "settleDelivery",
            [OUTBOX_GROUP, taken.delivery.id, taken.entry, outcome, status, problem, delay_ms, retry_for_ms])
        return _text(reply[1])
