"""What every route needs, built once in the lifespan and handed to routes explicitly."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.api.agent_instances import AgentInstances
from coordinator.api.auth import Authenticator
from coordinator.api.body_slots import LargeBodies
from coordinator.api.names import Names
from coordinator.blobs.artifacts import Artifacts
from coordinator.feed import EventFeed
from coordinator.longpoll import ClaimWaiter
from coordinator.metrics import Metrics
from coordinator.settings import Settings
from coordinator.state.epoch import Epoch
from coordinator.state.reads import Queries
from coordinator.state.store import Store
from coordinator.state.webhooks import WebhookStore


@dataclass
class Context:
    settings: Settings
    store: Store
    queries: Queries
    auth: Authenticator
    waiter: ClaimWaiter
    metrics: Metrics
    feed: EventFeed
    epoch: Epoch
    artifacts: Artifacts
    large_bodies: LargeBodies
    webhooks: WebhookStore
    agents: AgentInstances
    names: Names
