"""The host agent's heartbeat loop (`Heartbeat`): the complete device snapshot at the interval the
coordinator's last answer gave, and soon after the snapshot changes. Each carries the agent's
``capabilities`` as they are at that moment (the workflows loaded, the planner), which is what the
coordinator places workflow tasks by.

- The interval is the answer's ``heartbeat_interval_s``, kept within
  ``HEARTBEAT_INTERVAL_BOUNDS_S``; the configured one is only used until the first answer.
- The answer's ``draining`` is followed (``draining``, logged when it changes): a draining host
  gets no new work from the coordinator but keeps heartbeating, polling and finishing what it runs.
- ``409 unknown_device`` means an operator un-enrolled one of a managed host's devices: the agent
  enrolls its devices again (the forgotten one gets a new cloud id), then heartbeats after the
  loop's backoff; once per rejection, so a coordinator that keeps refusing cannot make it spin.
- ``401`` ends the loop and is handed to the agent (``on_revoked``); so does ``403`` (a valid
  credential used on another host's path: ``on_forbidden``), which retrying cannot fix either.
- Each answered heartbeat is told to ``on_answer``: the agent is ready once the first one is.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from agent.answers import (
    Conflict,
    Forbidden,
    MalformedAnswer,
    ProtocolError,
    Rejected,
    TransientError,
    Unauthorized,
)
from agent.client import HostClient
from agent.host_config import HostConfig
from agent.retry import retry
from agent.runtime import Executor
from wire import ErrorCode

log = logging.getLogger("agent.host")

# The coordinator's heartbeat interval is followed within these bounds, so a misconfigured
# coordinator can neither make a fleet hammer it nor make hosts look dead for minutes.
HEARTBEAT_INTERVAL_BOUNDS_S = (1.0, 300.0)

# ``pause(event, seconds)``: wait until the event is set or the time passes.
Pause = Callable[[asyncio.Event, float], Awaitable[None]]


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait until ``event`` is set or ``timeout`` passes. ``asyncio.timeout`` rather than
    ``wait_for``: on Python 3.11 ``wait_for`` can turn a cancellation into a TimeoutError."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass


def heartbeat_interval_from(answer: Any) -> float | None:
    """The coordinator's ``heartbeat_interval_s``, within ``HEARTBEAT_INTERVAL_BOUNDS_S``;
    ``None`` when the answer has no usable one."""
    value = answer.get("heartbeat_interval_s") if isinstance(answer, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    low, high = HEARTBEAT_INTERVAL_BOUNDS_S
    return min(max(float(value), low), high)


class Heartbeat:
    """Sends ``snapshot()`` until cancelled, or until the coordinator refuses the credential.

    ``soon()`` asks for a heartbeat now rather than at the interval's end. ``on_devices_renamed``
    is called when enrolling again gave a device a new cloud id. ``pause`` is the loop's wait;
    tests inject one to observe the schedule.
    """

    def __init__(self, client: HostClient, executor: Executor, snapshot: Callable[[], list[dict[str, Any]]],
                 config: HostConfig, *, on_revoked: Callable[[], None], on_devices_renamed: Callable[[], None],
                 on_forbidden: Callable[[], None] = lambda: None, on_answer: Callable[[], None] = lambda: None,
                 pause: Pause = wait_event) -> None:
        self._client = client
        self._executor = executor
        self._snapshot = snapshot
        self._agent_info = {"version": config.version, "hostname": config.hostname,
                            "instance_id": config.instance_id}
        self._retry = config.retry_policy
        self._managed = config.managed
        self._on_revoked = on_revoked
        self._on_devices_renamed = on_devices_renamed
        self._on_forbidden = on_forbidden
        self._on_answer = on_answer
        self._pause = pause
        self._dirty = asyncio.Event()  # send a heartbeat soon
        self.interval_s = config.heartbeat_interval_s  # the one in force
        self.draining = False  # the coordinator's last word

    def soon(self) -> None:
        """The snapshot changed: the coordinator should know now, not at the next interval."""
        self._dirty.set()

    async def run(self) -> None:
        backoff = self._retry.backoff()

        async def send() -> Any:
            self._dirty.clear()  # this snapshot is the newest the coordinator will have
            # Capabilities are read each time: a workflow file dropped into the folder is listed
            # (and so placed here) from the next heartbeat on.
            agent = {**self._agent_info, "capabilities": self._executor.capabilities()}
            return await self._client.heartbeat(self._snapshot(), agent)

        async def pause(seconds: float) -> None:
            await self._pause(self._dirty, seconds)

        while True:
            # Retries stay within one interval, so a short outage does not cost a missed beat.
            backoff.policy = replace(self._retry, cap_s=min(self._retry.cap_s, self.interval_s))
            try:
                answer = await retry(send, backoff, what="heartbeat", sleep=pause)
            except Unauthorized:
                self._on_revoked()
                return
            except Forbidden:  # a valid credential, of another host: retrying cannot fix it
                self._on_forbidden()
                return
            except ProtocolError as exc:  # 409 unknown_device/device_conflict, 4xx: not fixed by retrying now
                if self._managed and isinstance(exc, Conflict) and exc.code == ErrorCode.UNKNOWN_DEVICE:
                    if not await self._enroll_again(exc):
                        return
                    # The next heartbeat after the loop's backoff, not woken early by a snapshot
                    # change: a coordinator that keeps refusing gets one enrollment per rejection.
                    await self._pause(asyncio.Event(), backoff.next_delay())
                    continue
                log.error("heartbeat rejected: %s", exc)
                delay = self.interval_s
            else:
                self._on_answer()
                self._follow_draining(answer)
                delay = self._follow_interval(answer)
            await self._pause(self._dirty, delay)

    async def _enroll_again(self, rejection: Conflict) -> bool:
        """A managed host's answer to ``409 unknown_device``: an operator un-enrolled one of its
        devices, so every heartbeat naming it would be refused and the host would go offline.
        Enroll the devices again (idempotent; the forgotten one gets a new cloud id, persisted
        before use) so the next heartbeat reports it. False when the credential is gone."""
        device_id = rejection.details.get("device_id")
        log.warning(
            "the coordinator no longer knows device %s (409 unknown_device: un-enrolled?); "
            "enrolling this host's devices again",
            device_id if isinstance(device_id, str) else "(not named)",
        )
        try:
            changed = await self._executor.reenroll()
        except Unauthorized:
            self._on_revoked()
            return False
        except (TransientError, Rejected, MalformedAnswer) as exc:
            log.error("enrolling the devices again failed (%s); trying again after the next heartbeat", exc)
            return True
        if changed:
            log.info(
                "devices enrolled again; now reporting %s",
                ", ".join(f"{local_id} as {device_id}" for local_id, device_id in changed.items()),
            )
            self._on_devices_renamed()
        else:
            log.warning("devices enrolled again; no cloud id changed")
        return True

    def _follow_draining(self, answer: Any) -> None:
        draining = answer.get("draining") if isinstance(answer, dict) else None
        if not isinstance(draining, bool) or draining == self.draining:
            return
        self.draining = draining
        if draining:
            log.info("coordinator: this host is draining; no new work is assigned, running work finishes")
        else:
            log.info("coordinator: this host is no longer draining; new work may be assigned")

    def _follow_interval(self, answer: Any) -> float:
        interval = heartbeat_interval_from(answer)
        if interval is not None and interval != self.interval_s:
            given = answer["heartbeat_interval_s"]
            if interval != given:
                log.warning("coordinator heartbeat interval %ss is out of bounds; using %gs", given, interval)
            else:
                log.info("heartbeating every %gs, as the coordinator asks", interval)
            self.interval_s = interval
        return self.interval_s
