"""Turns for large bodies: how many bodies over the ordinary limit (``COORDINATOR_MAX_BODY_BYTES``)
this process reads and parses at once.

Renewals may be large (``COORDINATOR_MAX_RENEW_BODY_BYTES``, 8 MiB: a careless agent's screenshot
in its progress, read and rejected while the lease is still renewed), and a body read whole is
held two or three times over while it is joined and parsed: 16 renewals of 8 MiB at once took a
process from 54 to 190 MB. So at most ``COORDINATOR_MAX_CONCURRENT_LARGE_BODIES`` of them are
read at a time; the others wait their turn rather than being refused (a renewal keeps a lease
alive), their bodies meanwhile held back by the server's flow control (a few tens of KiB each),
and a turn is no longer than ``COORDINATOR_BODY_TIMEOUT_S``. A body declared within the ordinary
limit never waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request


class LargeBodies:
    def __init__(self, turns: int, ordinary_bytes: int) -> None:
        self._turns = asyncio.Semaphore(turns)
        self._ordinary_bytes = ordinary_bytes

    @contextlib.asynccontextmanager
    async def turn(self, request: Request) -> AsyncIterator[None]:
        """Read and parse ``request``'s body inside this block: at once when its declared length
        is ordinary, else in its turn (a body of no declared length may be large)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) <= self._ordinary_bytes:
            yield
            return
        async with self._turns:
            yield
