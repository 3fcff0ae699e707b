"""The long-polls: a claim's poll claims its host's oldest assignment or waits for one, and this
process's waiting polls are woken when work is assigned to their host. A live session's polls
(the host's for the next command, an operator's for an answer: ``wait_on``) wait on the same
machinery, under a topic of their session (coordinator/state/keys.py, ``commands_topic``,
``answers_topic``) where a claim waits under its host's id.

``claim_until_assigned`` is the whole wait of one poll: it registers the poll's wake-up (an
``asyncio.Event``) with
the process's ``ClaimWaiter``, runs the claim script, and, finding nothing, waits until woken,
its time is up, its client hangs up (``Hangup``) or the process stops (``ClaimWaiter.close``:
SIGTERM answers every waiting poll at once). ``api.host.claim`` only turns HTTP into its
arguments and its ``PollEnd`` into a response. The script side is the claimAssignment script
(registering the poll) and the scripts that assign work (pushing the wake-up).

A poll that finds nothing is registered, by the claim script in the same step that saw its
host's assignment list empty, as "a poll of host H waits on process P" (``polls:<host>``, a
zset of process id -> until when). The script that assigns work to H pushes H onto the inbox
list of every process registered there (``inbox:<process>``). Each process runs one loop that
blocks on its own inbox (BLMPOP, one connection however many polls wait, and every wake-up
waiting there, up to a batch, in one call) and sets the wake-ups of its polls of that host,
which then run the claim script again.

So a wake-up goes only to a process that holds a poll of the host. No wake-up is lost: a poll
registers its wake-up here before its first claim attempt, and the claim script registers the
poll in Redis atomically with finding nothing, so any later assignment pushes to this inbox; the
inbox is a list, so a push made while the loop is between two pops waits for the next pop.
Spurious wake-ups are harmless (the claim script decides). A registration expires with the
poll's wait, and an inbox shortly after its last push, so a crashed process leaves nothing for
long. After any Redis failure (a failover may lose the last pushes) every waiting poll is woken.

"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

from starlette.types import Receive

from coordinator.cancellation import cancelling
from coordinator.outage import Backoff, OutageLog
from coordinator.state.records import HostPrincipal
from coordinator.state.store import Claimed, Store
from coordinator.transport.base import RedisTransport

log = logging.getLogger("coordinator.longpoll")

# How long one blocking pop waits before it is issued again. It must stay under the client's
# socket timeout, or a quiet inbox would read as a dead connection; and it bounds how long a stop
# waits when a client library swallows the cancellation of a pop (see cancellation.py).
BLOCK_S = 1
# The most wake-ups one blocking pop takes.
POP_BATCH = 100
# The ASGI scope extension under which a server offers a request's `ClientConnection`
# (serve/server.py does); without it a poll reads ASGI messages until ``http.disconnect``.
CONNECTION = "tether.connection"


class ClientConnection(Protocol):
    """What a waiting poll may ask of the connection its request came on."""

    def peer_closed(self) -> bool:
        """Whether the client has hung up, asked of the socket now."""
        ...

    def on_lost(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` when the connection is lost (at once if it already is), instead of
        any callback set before; ``None`` sets none."""
        ...


def new_process_id() -> str:
    """An id naming this process's inbox: unique per start, so a restarted process never reads
    what was pushed for its previous life."""
    return "p_" + secrets.token_hex(8)


class ClaimWaiter:
    """This process's waiting polls, by host, and the loop that wakes them from its inbox."""

    def __init__(self, redis: RedisTransport, inbox_key: str, process_id: str) -> None:
        self._redis = redis
        self._inbox = inbox_key
        self.process_id = process_id
        # host id (or a session's topic) -> its waiting polls. A list: a host keeps one poll open (the agent's claim
        # loop), seldom two, and a list of one is 64 bytes where a set is 216.
        self._waiting: dict[str, list[asyncio.Event]] = {}
        self._count = 0
        self.closed = False

    def close(self) -> None:
        """The process is told to stop: every waiting poll, and every poll that arrives from now
        on, answers 204 at once. Call on the event loop's thread."""
        self.closed = True
        self.wake_all()

    @property
    def waiting(self) -> int:
        """How many polls of this process wait right now."""
        return self._count

    def register(self, host_id: str) -> asyncio.Event:
        wakeup = asyncio.Event()
        self._waiting.setdefault(host_id, []).append(wakeup)
        self._count += 1
        return wakeup

    def unregister(self, host_id: str, wakeup: asyncio.Event) -> None:
        """The poll no longer waits."""
        wakeups = self._waiting.get(host_id)
        if wakeups is None or wakeup not in wakeups:
            return
        wakeups.remove(wakeup)
        self._count -= 1
        if not wakeups:
            del self._waiting[host_id]

    def wake_all(self) -> None:
        for wakeups in self._waiting.values():
            for wakeup in wakeups:
                wakeup.set()

    def _wake_popped(self, popped: Sequence[bytes | str]) -> None:
        """Wake the polls of every host popped."""
        for value in popped:
            for wakeup in self._waiting.get(value.decode() if isinstance(value, bytes) else value, ()):
                wakeup.set()

    async def run(self) -> None:
        """Pop this process's inbox until cancelled, on a connection of its own; after any Redis
        failure, back off with jitter, then wake every poll, since pushes may have been lost
        meanwhile."""
        await self._pop_forever(self._redis)

    async def _pop_forever(self, redis: RedisTransport) -> None:
        backoff = Backoff()
        failed = False
        outage = OutageLog(log, "wake-up inbox")
        while True:
            try:
                if cancelling():
                    raise asyncio.CancelledError
                popped = await redis.blocking_pop(self._inbox, BLOCK_S, POP_BATCH)
                if failed:
                    failed = False
                    backoff.reset()
                    outage.succeeded()
                    self.wake_all()
                if popped:
                    self._wake_popped(popped)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any Redis failure: pop again
                if cancelling():
                    raise asyncio.CancelledError from None
                outage.failed(exc)
                failed = True
                self.wake_all()
                # Capped short: until this loop pops again, no poll of this process hears of
                # work assigned to it, however long it has been since Redis came back.
                await asyncio.sleep(backoff.next_delay())


# -- the hang-up watch ---------------------------------------------------------------------


async def _client_gone(receive: Receive) -> None:
    """Returns once the client has disconnected (the body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class Hangup:
    """Sets a waiting poll's wake-up when its client hangs up, and says whether it has.

    Through the connection (``CONNECTION``) where the server is ours: a callback when it
    is lost, and a look at the socket, since a request handled late, after a stall, may have lost
    its client before the event loop read the hang-up. Elsewhere (another ASGI server, the tests'
    in-process transport) through a task that reads the request's messages until
    ``http.disconnect``, started before the first wait."""

    def __init__(self, connection: ClientConnection | None, receive: Receive, wakeup: asyncio.Event) -> None:
        self._receive = receive
        self._wakeup = wakeup
        self._reader: asyncio.Task[None] | None = None
        self._lost = False
        self._connection = connection
        if connection is not None:
            connection.on_lost(self._on_lost)

    def _on_lost(self) -> None:
        self._lost = True
        self._wakeup.set()

    def happened(self) -> bool:
        """Whether the client has hung up, asked of the socket too: the request may have waited
        in the kernel behind its client's hang-up, which the event loop has not read yet."""
        if self._reader is not None and self._reader.done():
            return True
        if self._connection is None:
            return False
        return self._lost or self._connection.peer_closed()

    def watch(self) -> None:
        """Before each wait: make sure the hang-up will be noticed while the poll waits."""
        if self._connection is None and self._reader is None:
            self._reader = asyncio.ensure_future(_client_gone(self._receive))
            self._reader.add_done_callback(lambda _: self._wakeup.set())

    def close(self) -> None:
        if self._connection is not None:
            self._connection.on_lost(None)
        if self._reader is not None:
            self._reader.cancel()


# -- the claim, until assigned -------------------------------------------------------------


class Outcome(StrEnum):
    """How a claim's long-poll ended (the ``tether_claims_total`` label)."""

    ASSIGNED = "assigned"
    EMPTY = "empty"
    DISCONNECTED = "disconnected"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True)
class PollEnd:
    """How a poll ended, and its assignment if it got one."""

    outcome: Outcome
    claimed: Claimed | None = None


async def claim_until_assigned(waiter: ClaimWaiter, store: Store, host: HostPrincipal, claim_id: str,
                               wait_s: float, lease_ttl_ms: int, connection: ClientConnection | None,
                               receive: Receive) -> PollEnd:
    """Claim ``host``'s oldest assignment, waiting up to ``wait_s`` for one; ends at once when
    the client hangs up (``connection``, or else ``receive``) or the process stops.

    The poll registers its wake-up before the first attempt, so a wake-up between an attempt and
    the wait is kept; every attempt first checks that the client is still there, since a poll
    whose client has gone must claim nothing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    wakeup = waiter.register(host.host_id)
    hangup = Hangup(connection, receive, wakeup)
    # Minted now, not after a wake-up: an attempt that claims nothing binds no lease, so the id
    # stays unused for the next.
    lease_id = "l_" + secrets.token_hex(16)
    try:
        while True:
            if hangup.happened():
                return PollEnd(Outcome.DISCONNECTED)
            if waiter.closed:
                return PollEnd(Outcome.SHUTDOWN)
            wakeup.clear()
            wait_ms = int((deadline - loop.time()) * 1000)
            claimed = await store.claim(host, claim_id, lease_id, lease_ttl_ms, waiter.process_id, max(wait_ms, 0))
            if claimed is not None:
                return PollEnd(Outcome.ASSIGNED, claimed)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return PollEnd(Outcome.EMPTY)
            hangup.watch()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await wakeup.wait()
    finally:
        waiter.unregister(host.host_id, wakeup)
        hangup.close()


# -- any other wait: a session's polls -------------------------------------------------------

T = TypeVar("T")


async def wait_on(waiter: ClaimWaiter, topic: str, attempt: Callable[[int], Awaitable[T | None]], wait_s: float,
                  connection: ClientConnection | None = None, receive: Receive | None = None) -> T | None:
    """``attempt``'s first answer that is not None, trying again each time ``topic`` is woken,
    until ``wait_s`` is up (then None). ``attempt`` is given the milliseconds left, and registers
    the wait in Redis in the step that found nothing (as the claim script does), so no wake-up is
    lost: the wake-up here is registered before the first attempt. Ends with None at once when
    the process stops or, given ``receive``, the client hangs up."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    wakeup = waiter.register(topic)
    hangup = Hangup(connection, receive, wakeup) if receive is not None else None
    try:
        while True:
            if hangup is not None and hangup.happened():
                return None
            wakeup.clear()
            wait_ms = 0 if waiter.closed else max(int((deadline - loop.time()) * 1000), 0)
            answer = await attempt(wait_ms)
            remaining = deadline - loop.time()
            if answer is not None or remaining <= 0 or waiter.closed:
                return answer
            if hangup is not None:
                hangup.watch()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await wakeup.wait()
    finally:
        waiter.unregister(topic, wakeup)
        if hangup is not None:
            hangup.close()
