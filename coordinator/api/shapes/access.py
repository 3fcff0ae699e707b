"""What the operator API answers of credentials and webhooks: enrollment and operator tokens, the
caller, webhooks and their deliveries."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict

import wire
from coordinator.api.bodies import Labels
from coordinator.api.shapes.common import Count, DeliveryState, Id, Scopes, Time, WebhookEvent


class EnrollmentToken(TypedDict):
    id: Id
    created_at: Time
    expires_at: Time
    expired: bool
    max_uses: int
    uses: Count
    uses_left: Count
    labels: Labels
    revoked: bool


class TokenCreated(EnrollmentToken):
    token: Annotated[str, Field(pattern=f"^{wire.ENROLLMENT_TOKEN_PREFIX}")]  # shown once


class Tokens(TypedDict):
    enrollment_tokens: list[EnrollmentToken]
    next_cursor: str | None


class OperatorToken(TypedDict):
    """An operator token, never its secret nor its digest."""

    id: Id
    name: Id
    scopes: Scopes
    created_at: Time
    expires_at: Time
    last_used_at: Time | None
    created_by: str | None
    team: Id | None
    expired: bool
    revoked: bool


class OperatorTokenCreated(OperatorToken):
    token: Annotated[str, Field(pattern=f"^{wire.OPERATOR_TOKEN_PREFIX}")]  # shown once


class OperatorTokens(TypedDict):
    operator_tokens: list[OperatorToken]
    next_cursor: str | None


class Me(TypedDict):
    name: str
    scopes: Scopes
    expires_at: Time | None
    token_id: Id | None
    team: Id | None


class Webhook(TypedDict):
    """A webhook as listed: never its secret."""

    id: Id
    url: str
    events: list[WebhookEvent]
    team: Id | None
    created_at: Time
    created_by: str


class WebhookCreated(Webhook):
    secret: Annotated[str, Field(pattern=f"^{wire.WEBHOOK_SECRET_PREFIX}")]  # shown once


class Webhooks(TypedDict):
    webhooks: list[Webhook]


class Delivery(TypedDict):
    id: Id
    event: WebhookEvent
    subject: Id
    created_at: Time
    attempts: Count
    last_status: int | None
    last_error: str | None
    last_attempt_at: Time | None
    next_attempt_at: Time | None
    delivered_at: Time | None
    state: DeliveryState


class Deliveries(TypedDict):
    deliveries: list[Delivery]  # newest first
