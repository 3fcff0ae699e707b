"""A webhook delivery's signature (PROTOCOL.md, "Webhooks"), made and checked in one place: the
coordinator signs with ``signature`` (coordinator/webhooks.py), a receiver checks with
``verify_signature`` (exported as ``tether.verify_signature``; docs/operations.md, "Webhooks",
has the same check in shell).

    from tether import verify_signature

    if not verify_signature(secret, request.headers["Tether-Signature"], raw_body):
        return 400
    # then dedupe on request.headers["Tether-Delivery"]: delivery is at least once

The header is ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" keyed with the
secret>``. The body must be the bytes as received, before any JSON parsing.
"""

from __future__ import annotations

import hashlib
import hmac
import time


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Tether-Signature`` header of ``body`` sent at ``timestamp`` (unix seconds)."""
    return f"t={timestamp},v1={_mac(secret, timestamp, body)}"


def verify_signature(secret: str, header: str, body: bytes | str, tolerance_s: float = 300,
                     now: float | None = None) -> bool:
    """Whether ``header`` (a ``Tether-Signature``) signs ``body`` with ``secret`` and was made
    within ``tolerance_s`` of ``now`` (default: this machine's clock), so a captured delivery
    cannot be replayed later. Any ``v1`` that matches will do (more than one may be sent)."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        return False
    raw = body.encode() if isinstance(body, str) else body
    expected = _mac(secret, timestamp, raw).encode()
    return any(hmac.compare_digest(expected, candidate.encode()) for candidate in candidates)
