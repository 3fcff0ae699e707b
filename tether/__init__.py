"""Tether's operator client: ``tether.Client`` (the operator API as plain method calls) and the
``tether`` command built on it (``tether.cli``).

    from tether import Client, TetherError

    with Client("http://coordinator:8000", token) as tether:
        task = tether.create_task(workflow="login-smoke", selector={"driver": "adb"})
        with tether.feed(task_id=task["task_id"]) as feed:
            for event in feed:
                ...

A webhook receiver checks a delivery with ``tether.verify_signature(secret, header, body)`` (defined in
``wire.signatures``, beside the coordinator's signing, so the two cannot drift).

It depends on the contract only (and on ``wire``, its vocabulary), never on the coordinator's or
the agent's code: it is a client like any operator's script.
"""

from __future__ import annotations

from tether.client import Client
from tether.errors import TetherError
from tether.feed import Feed
from wire.signatures import verify_signature

__all__ = ["Client", "Feed", "TetherError", "verify_signature"]
