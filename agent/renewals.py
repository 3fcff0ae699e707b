"""A host's lease renewals, sent together (PROTOCOL.md, ``POST .../renewals``).

Each ``LeasedRun`` decides when its own lease needs renewing (``agent/lease_run.py``). While the
host holds one lease, that is one single renewal. While it holds two or more, a renewal that is
due waits ``BATCH_GATHER_S`` for others that are due too, and then every lease the host holds
rides in one batch, each with its latest progress: the leases that did not ask are renewed
early, so from the first batch on their schedules coincide, and a rack of 20 phones costs one
request per renewal interval rather than 20. Early renewals on step changes, rate-limited per
lease from its latest renewal, so also from one it rode along in, fall due together and ride in
the same batch.

A batch that fails as a whole (no answer, a 5xx) fails the renewals that asked for it, which
retry as a single renewal would; the leases that only rode along keep their own schedule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from agent.answers import Conflict, ProtocolError, TransientError
from agent.client import HostClient

# How long a renewal that is due waits for others of the host before the batch goes: short
# against any lease (tests run with sub-second ones), long enough for renewals due at one
# instant to ride together.
BATCH_GATHER_S = 0.05


class Renewable(Protocol):
    """A lease a ``LeasedRun`` keeps: what its renewal sends, and what it does with an answer it
    did not ask for (the lease rode in another lease's batch)."""

    def renewal_entry(self) -> dict[str, Any]:
        """``lease_id``, ``task_id``, ``attempt`` and the latest ``progress`` (or ``None``)."""
        ...

    def renewed_alongside(self, answer: dict[str, Any], sent_at: float) -> None: ...


class HostRenewals:
    """The leases of one host, renewed one at a time or in batches (see the module's doc)."""

    def __init__(self, client: HostClient, clock: Callable[[], float], gather_s: float = BATCH_GATHER_S) -> None:
        self._client = client
        self._clock = clock
        self._gather_s = gather_s
        self._held: list[Renewable] = []
        # The batch now gathering: who asked, and, once it is answered, each lease's answer.
        self._askers: list[Renewable] = []
        self._batch: asyncio.Future[dict[Renewable, dict[str, Any]]] | None = None
        self._sending: set[asyncio.Task[None]] = set()  # held, so none is collected mid-flight

    def hold(self, lease: Renewable) -> None:
        self._held.append(lease)

    def release(self, lease: Renewable) -> None:
        if lease in self._held:
            self._held.remove(lease)

    async def renew(self, lease: Renewable) -> dict[str, Any]:
        """Renew ``lease``: a single renewal's answer, or ``Conflict`` with its code, as
        ``HostClient.renew`` answers; in a batch while the host holds other leases."""
        if all(other is lease for other in self._held):
            entry = lease.renewal_entry()
            return await self._client.renew(entry["lease_id"], task_id=entry["task_id"], attempt=entry["attempt"],
                                            progress=entry["progress"])
        if self._batch is None:
            loop = asyncio.get_running_loop()
            self._batch = loop.create_future()
            # An asker that gave up (its lease's deadline) leaves a failed batch unread: read here.
            self._batch.add_done_callback(lambda done: done.cancelled() or done.exception())
            loop.call_later(self._gather_s, self._start_sending)
        batch = self._batch
        self._askers.append(lease)
        answer = (await asyncio.shield(batch))[lease]
        if answer.get("status") == 409:
            code = answer.get("code")
            raise Conflict(f"renewal refused: {code}", status=409, code=code if isinstance(code, str) else None)
        return answer

    def _start_sending(self) -> None:
        task = asyncio.get_running_loop().create_task(self._send())
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self) -> None:
        batch, askers = self._batch, self._askers
        assert batch is not None, "a batch is sent once, by the call its first asker scheduled"
        self._batch, self._askers = None, []
        riders = [lease for lease in self._held if lease not in askers]
        leases = [*askers, *riders]
        entries = [lease.renewal_entry() for lease in leases]
        sent_at = self._clock()
        try:
            answers = await self._client.renew_many(entries)
            batch.set_result(dict(zip(leases, answers, strict=True)))
        except ProtocolError as exc:  # the askers' retries decide what it means; riders keep their schedule
            batch.set_exception(exc)
            return
        finally:
            if not batch.done():  # crashed or cancelled: its askers retry rather than wait forever
                batch.set_exception(TransientError("the renewal batch was not sent"))
        for lease, answer in zip(leases, answers, strict=True):
            if lease in riders:
                lease.renewed_alongside(answer, sent_at)
