"""Test doubles for the agent's protocol loops: a coordinator behind ``httpx.MockTransport`` and
an executor whose runs the test finishes by hand. Used by ``test_host_*.py``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import SecretStr

from agent.answers import Assignment
from agent.client import CoordinatorClient
from agent.host import HostAgent
from agent.host_config import HostConfig
from agent.retry import RetryPolicy
from agent.runtime import DeviceRecord, Outcome, Progress, RunControl
from tests.support import wait_until_async

HOST_ID = "host-a"
HOST_TOKEN = "tht_test-host-token-0123456789abcdefghijklmnop"

# A fault for the next request to an endpoint:
#   "drop_before"  the request never reaches the coordinator (ConnectError)
#   "drop_after"   the coordinator handles it, then the response is lost (ReadError)
#   "hang"         no answer, ever (until the client gives up or is cancelled)
#   (status, code) an error answer
Fault = str | tuple[int, str]
MAX_ATTEMPTS = 3  # the fake's max_attempts of every task: a retryable failure before it is requeued


async def wait_until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` on the event loop (no fixed sleeps standing in for synchronisation)."""
    await wait_until_async(predicate, timeout=timeout, interval=0.005, what=what)


@dataclass
class Call:
    method: str
    path: str
    body: Any
    params: dict[str, str]
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)


class FakeCoordinator:
    """Enough of the host API for the agent's loops, with fault injection per endpoint."""

    def __init__(self, *, lease_ttl_ms: int = 3000, host_id: str = HOST_ID, token: str = HOST_TOKEN) -> None:
        self.host_id = host_id
        self.token = token
        self.lease_ttl_ms = lease_ttl_ms
        self.calls: list[Call] = []
        self.faults: dict[str, list[Fault]] = {}
        self.always: dict[str, Fault] = {}  # a fault for every request to the endpoint
        self.pending: list[dict[str, Any]] = []
        self.claimed: dict[str, dict[str, Any]] = {}  # claim_id -> assignment
        self.results: dict[tuple[str, int], dict[str, Any]] = {}
        self.cancel_requested: set[str] = set()
        self.renew_conflict: dict[str, str] = {}  # lease_id -> 409 code
        self.enrollment_token: str | None = None  # set to accept POST /internal/v1/enroll
        self.enrolled: tuple[str, str] | None = None
        self.heartbeat_interval_s: Any = None  # put into heartbeat answers when set
        self.draining: Any = None  # put into heartbeat answers when set
        self.device_ids: dict[str, str] = {}  # local id -> cloud id, as enrolled
        self.retired: set[str] = set()  # cloud ids an operator un-enrolled (forget)
        # Live sessions (``commands``): commands waiting per task, the answers delivered (first
        # answer of a command_id stands), and the flags the next poll answers with.
        self.commands: dict[str, list[dict[str, Any]]] = {}
        self.answers: dict[str, dict[str, Any]] = {}
        self.end_requested: dict[str, str | None] = {}  # task id -> end_reason sent (None: none)
        self._commands_came = asyncio.Event()
        # Eager dispatch: a result with "next" takes the first pending assignment for its device
        # as its next_assignment (the real coordinator's placement decides; this one only
        # answers), and a replay answers the same one.
        self.eager = False
        self.dispatched: dict[tuple[str, int], dict[str, Any] | None] = {}
        self.made: dict[str, dict[str, Any]] = {}  # task id -> every assignment `assign` made
        self._work = asyncio.Event()
        self._never = asyncio.Event()

    # -- test helpers ------------------------------------------------------------------------

    def renewals_of(self, task_id: str) -> list[dict[str, Any]]:
        """Every renewal sent for the task, alone or in a batch: each as a single renewal's body
        (``lease_id`` added for a batch's)."""
        sent: list[dict[str, Any]] = []
        for call in self.calls:
            endpoint = _endpoint(call.path)
            bodies = [call.body] if endpoint == "renew" else call.body["leases"] if endpoint == "renewals" else []
            sent += [body for body in bodies if body["task_id"] == task_id]
        return sent

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def client(self) -> CoordinatorClient:
        return CoordinatorClient("http://coordinator.test", transport=self.transport(), timeout=httpx.Timeout(5.0))

    def assign(self, device_id: str = "phone-1", *, kind: str = "goal", **extra: Any) -> dict[str, Any]:
        task_id = f"task-{uuid.uuid4().hex[:8]}"
        assignment: dict[str, Any] = {
            "task_id": task_id,
            "attempt": 1,
            "lease_id": f"lease-{uuid.uuid4().hex[:8]}",
            "lease_ttl_ms": self.lease_ttl_ms,
            "lease_expires_at": "2026-12-02T08:00:00.000Z",
            "device_id": device_id,
            "kind": kind,
        }
        if kind == "goal":
            assignment.update(goal="Turn on airplane mode", max_steps=10)
        assignment.update(extra)
        self.made[task_id] = assignment
        self.pending.append(assignment)
        self._work.set()
        return assignment

    def command(self, task_id: str, action: dict[str, Any]) -> str:
        """An operator's command for a session: the host's waiting poll takes it at once."""
        command_id = f"c_{uuid.uuid4().hex[:8]}"
        self.commands.setdefault(task_id, []).append({"command_id": command_id, "action": action})
        self._commands_came.set()
        return command_id

    def cancel(self, task_id: str) -> None:
        self.cancel_requested.add(task_id)
        self._commands_came.set()

    def end(self, task_id: str, reason: str | None = None) -> None:
        self.end_requested[task_id] = reason
        self._commands_came.set()

    def fail_next(self, endpoint: str, *faults: Fault) -> None:
        self.faults.setdefault(endpoint, []).extend(faults)

    def of(self, endpoint: str) -> list[Call]:
        return [call for call in self.calls if _endpoint(call.path) == endpoint]

    def forget(self, device_id: str) -> None:
        """``DELETE /api/v1/devices/{device_id}``: the cloud id is retired; enrolling the local
        device again mints a new one, and a heartbeat naming the old one gets 409 unknown_device."""
        self.retired.add(device_id)
        self.device_ids = {local: cloud for local, cloud in self.device_ids.items() if cloud != device_id}

    def reported_ids(self) -> list[list[str]]:
        """The device ids of every heartbeat, in order."""
        return [[d["device_id"] for d in call.body["devices"]] for call in self.of("heartbeat")]

    def heartbeat_statuses(self) -> list[dict[str, str]]:
        return [{d["device_id"]: d["status"] for d in call.body["devices"]} for call in self.of("heartbeat")]

    # -- the fake server ---------------------------------------------------------------------

    async def handle(self, request: httpx.Request) -> httpx.Response:
        is_json = request.headers.get("content-type", "").startswith("application/json")
        body = json.loads(request.content) if request.content and is_json else request.content or None
        call = Call(request.method, request.url.path, body, dict(request.url.params), dict(request.headers))
        self.calls.append(call)
        endpoint = _endpoint(call.path)
        fault = self.always.get(endpoint)
        if fault is None and self.faults.get(endpoint):
            fault = self.faults[endpoint].pop(0)
        if fault == "drop_before":
            raise httpx.ConnectError("connection refused", request=request)
        if fault == "hang":
            await self._never.wait()
        if isinstance(fault, tuple):
            return _error(*fault)
        if endpoint == "enroll":
            response = self._enroll(call)
        elif request.headers.get("authorization") != f"Bearer {self.token}":
            return _error(401, "unauthorized")
        else:
            response = await getattr(self, f"_{endpoint}")(call)
        if fault == "drop_after":
            raise httpx.ReadError("connection reset by peer", request=request)
        return response

    def _enroll(self, call: Call) -> httpx.Response:
        if self.enrollment_token is None or call.headers.get("authorization") != f"Bearer {self.enrollment_token}":
            return _error(401, "unauthorized")
        if self.enrolled is not None:
            if self.enrolled != (call.body["enrollment_id"], call.body["host_token"]):
                return _error(401, "unauthorized")  # used up
            return httpx.Response(200, json={"host_id": self.host_id, "created": False})
        self.enrolled = (call.body["enrollment_id"], call.body["host_token"])
        self.token = call.body["host_token"]
        return httpx.Response(201, json={"host_id": self.host_id, "created": True})

    async def _devices_enroll(self, call: Call) -> httpx.Response:
        # Idempotent per local id; a device enrolled again after ``forget`` gets a new cloud id.
        for device in call.body["devices"]:
            local_id = device["local_id"]
            if local_id not in self.device_ids:
                device_id = f"{self.host_id}.{local_id}"
                generation = 1
                while device_id in self.retired:
                    generation += 1
                    device_id = f"{self.host_id}.{local_id}.{generation}"
                self.device_ids[local_id] = device_id
        return httpx.Response(200, json={"devices": [
            {"local_id": d["local_id"], "driver": d["driver"], "device_id": self.device_ids[d["local_id"]]}
            for d in call.body["devices"]
        ]})

    async def _heartbeat(self, call: Call) -> httpx.Response:
        for device in call.body["devices"]:
            if device["device_id"] in self.retired:  # the whole snapshot is rejected
                return _error(409, "unknown_device", {"device_id": device["device_id"]})
        answer = {"host_id": self.host_id, "devices": len(call.body["devices"])}
        if self.heartbeat_interval_s is not None:
            answer["heartbeat_interval_s"] = self.heartbeat_interval_s
        if self.draining is not None:
            answer["draining"] = self.draining
        return httpx.Response(200, json=answer)

    async def _claim(self, call: Call) -> httpx.Response:
        claim_id = (call.body or {}).get("claim_id")
        if claim_id in self.claimed:
            return httpx.Response(200, json=self.claimed[claim_id])
        wait_s = float(call.params.get("wait_s", "0"))
        deadline = time.monotonic() + wait_s
        while not self.pending:
            self._work.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return httpx.Response(204)
            try:
                async with asyncio.timeout(remaining):
                    await self._work.wait()
            except TimeoutError:
                return httpx.Response(204)
        assignment = self.pending.pop(0)
        if claim_id:
            self.claimed[claim_id] = assignment
        return httpx.Response(200, json=assignment)

    async def _renew(self, call: Call) -> httpx.Response:
        lease_id = call.path.split("/")[-2]
        if lease_id in self.renew_conflict:
            return _error(409, self.renew_conflict[lease_id])
        progress = "stored" if "progress" in call.body else "omitted"
        return httpx.Response(
            200,
            json={
                "lease_ttl_ms": self.lease_ttl_ms,
                "lease_expires_at": "2026-12-02T08:00:00.000Z",
                "cancel_requested": call.body["task_id"] in self.cancel_requested,
                "progress": progress,
            },
        )

    async def _commands(self, call: Call) -> httpx.Response:
        """A session's poll: the answers delivered, then the commands waiting (or those that come
        within ``wait_s``), with a renewal's answer and 409s."""
        lease_id = call.path.split("/")[-2]
        if lease_id in self.renew_conflict:
            return _error(409, self.renew_conflict[lease_id])
        task_id = call.body["task_id"]
        for answer in call.body["answers"]:
            self.answers.setdefault(answer["command_id"], answer)
        deadline = time.monotonic() + float(call.params.get("wait_s", "0"))
        while not (self.commands.get(task_id) or task_id in self.end_requested or task_id in self.cancel_requested):
            self._commands_came.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    await self._commands_came.wait()
            except TimeoutError:
                break
        answer: dict[str, Any] = {
            "commands": self.commands.pop(task_id, []), "lease_ttl_ms": self.lease_ttl_ms,
            "lease_expires_at": "2026-12-02T08:00:00.000Z",
            "cancel_requested": task_id in self.cancel_requested, "end_requested": task_id in self.end_requested}
        if self.end_requested.get(task_id):
            answer["end_reason"] = self.end_requested[task_id]
        return httpx.Response(200, json=answer)

    async def _renewals(self, call: Call) -> httpx.Response:
        """Each lease as ``_renew`` answers it alone."""
        answers = []
        for lease in call.body["leases"]:
            single = await self._renew(Call("POST", f"/leases/{lease['lease_id']}/renew", lease, {}, {}))
            answer = {"lease_id": lease["lease_id"], "status": single.status_code, **single.json()}
            if single.status_code == 409:
                answer = {"lease_id": lease["lease_id"], "status": 409, "code": single.json()["error"]["code"]}
            answers.append(answer)
        return httpx.Response(200, json={"leases": answers})

    async def _artifacts(self, call: Call) -> httpx.Response:
        """Every upload is taken (what a test checks is in ``calls``; the real route is tested
        against the real coordinator)."""
        name = call.path.rsplit("/", 1)[-1]
        return httpx.Response(201, json={"name": name, "size": len(call.body or b""), "sha256": "0" * 64,
                                         "content_type": call.headers.get("content-type"),
                                         "step_index": call.params.get("step_index")})

    async def _results(self, call: Call) -> httpx.Response:
        key = (call.body["task_id"], call.body["attempt"])
        report = {k: v for k, v in call.body.items() if k != "next"}  # `next` is no part of the report
        recorded = self.results.get(key)
        if recorded is not None:
            if recorded != report:
                return _error(409, "result_conflict")
            return httpx.Response(200, json={**_result_answer(recorded), "replayed": True,
                                             **self._next_answer(call.body, key)})
        self.results[key] = report
        if self.eager and call.body.get("next") is True and not call.body.get("retryable"):
            device = self.made[call.body["task_id"]]["device_id"] if call.body["task_id"] in self.made else None
            following = next((a for a in self.pending if a["device_id"] == device), None)
            if following is not None:
                self.pending.remove(following)
            self.dispatched[key] = following
        return httpx.Response(200, json={**_result_answer(call.body), "replayed": False,
                                         **self._next_answer(call.body, key)})

    def _next_answer(self, body: dict[str, Any], key: tuple[str, int]) -> dict[str, Any]:
        if body.get("next") is not True:
            return {}
        return {"next_assignment": self.dispatched.get(key)}


def _endpoint(path: str) -> str:
    if "/artifacts/" in path:
        return "artifacts"
    if path.endswith("/renew"):
        return "renew"
    if path.endswith("/devices/enroll"):
        return "devices_enroll"
    return path.rstrip("/").split("/")[-1]


def _result_answer(body: dict[str, Any]) -> dict[str, Any]:
    requeued = body.get("retryable") is True and body["attempt"] < MAX_ATTEMPTS
    return {
        "task_id": body["task_id"],
        "attempt": body["attempt"],
        "status": body["status"],
        "task_status": "queued" if requeued else body["status"],
        "recorded_at": "2026-12-02T08:00:00.000Z",
    }


def _error(status: int, code: str, details: dict[str, Any] | None = None) -> httpx.Response:
    error: dict[str, Any] = {"code": code, "message": code.replace("_", " ")}
    if details is not None:
        error["details"] = details
    return httpx.Response(status, json={"error": error})


class FakeExecutor:
    """Runs last until the test calls ``finish`` (or the agent stops them)."""

    def __init__(self, device_ids: tuple[str, ...] = ("phone-1",)) -> None:
        self._devices = [
            DeviceRecord(device_id=d, driver="sim", local_id=d, attributes={"model": "Tether Sim"}) for d in device_ids
        ]
        self.controls: dict[str, RunControl] = {}
        self.started: list[str] = []
        self.returned: dict[str, Outcome] = {}
        self._finish: dict[str, asyncio.Future[Outcome]] = {}
        self.running_per_device: dict[str, int] = {}
        self.max_running_per_device = 0
        self.on_start: Callable[[Assignment, RunControl], Awaitable[None]] | None = None
        self.reenrolled = 0  # calls of ``reenroll``
        # What ``capabilities`` answers; a test may change it between heartbeats.
        self.can_run: dict[str, list[str]] = {"workflows": ["note-smoke"], "planners": ["scripted"]}

    def devices(self) -> list[DeviceRecord]:
        return list(self._devices)

    def capabilities(self) -> dict[str, list[str]]:
        return {kind: list(names) for kind, names in self.can_run.items()}

    async def refresh(self) -> None:
        pass  # these devices never change

    async def reenroll(self) -> dict[str, str]:
        self.reenrolled += 1
        return {}  # the same ids again

    def finish(self, task_id: str, outcome: Outcome | None = None) -> None:
        self._future(task_id).set_result(outcome or Outcome("succeeded", None, {"steps": 3}))

    def _future(self, task_id: str) -> asyncio.Future[Outcome]:
        if task_id not in self._finish:
            self._finish[task_id] = asyncio.get_running_loop().create_future()
        return self._finish[task_id]

    async def run(self, assignment: Assignment, control: RunControl) -> Outcome:
        device = assignment.device_id
        self.running_per_device[device] = self.running_per_device.get(device, 0) + 1
        self.max_running_per_device = max(self.max_running_per_device, self.running_per_device[device])
        self.controls[assignment.task_id] = control
        self.started.append(assignment.task_id)
        try:
            if self.on_start is not None:
                await self.on_start(assignment, control)
            finished = self._future(assignment.task_id)
            stopped = asyncio.ensure_future(control.wait_stopped())
            await asyncio.wait({finished, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            outcome = finished.result() if finished.done() else Outcome("cancelled", control.stop_reason, {"steps": 1})
            self.returned[assignment.task_id] = outcome
            return outcome
        finally:
            self.running_per_device[device] -= 1


def publish(control: RunControl, step_index: int, status: str, summary: str) -> None:
    control.publish(Progress(step_index, status, summary))


def make_agent(
    coordinator: FakeCoordinator, executor: FakeExecutor, **overrides: Any
) -> tuple[HostAgent, CoordinatorClient]:
    client = coordinator.client()
    options: dict[str, Any] = {
        "hostname": "lab-7",
        "version": "test",
        "labels": {"site": "berlin"},
        "poll_wait_s": 1,
        "heartbeat_interval_s": 0.2,
        "shutdown_grace_s": 1.0,
        "retry_policy": RetryPolicy(base_s=0.01, cap_s=0.05),
        "min_poll_interval_s": 0.01,
    }
    options.update(overrides)
    # What a test injects into the agent; every other override is configuration.
    injected = {name: options.pop(name) for name in ("pause", "clock") if name in options}
    agent = HostAgent(client.host(coordinator.host_id, SecretStr(coordinator.token)), executor,
                      HostConfig(**options), **injected)
    return agent, client


class Running:
    """``async with Running(agent, client) as r``: the agent's loops run until the block ends."""

    def __init__(self, agent: HostAgent, client: CoordinatorClient) -> None:
        self.agent = agent
        self.client = client
        self.shutdown = asyncio.Event()
        self.task: asyncio.Task[int] | None = None

    async def __aenter__(self) -> Running:
        self.task = asyncio.create_task(self.agent.run(self.shutdown))
        return self

    async def stop(self) -> int:
        assert self.task is not None
        self.shutdown.set()
        return await asyncio.wait_for(self.task, 10)

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.task is not None
        if not self.task.done():
            self.shutdown.set()
            try:
                await asyncio.wait_for(self.task, 10)
            finally:
                await self.client.aclose()
        else:
            await self.client.aclose()


def results_for(coordinator: FakeCoordinator, task_id: str) -> list[dict]:
    """The result reports the fake coordinator received for one task."""
    return [call.body for call in coordinator.of("results") if call.body["task_id"] == task_id]


def device_free(agent_snapshot: list[dict], device_id: str = "phone-1") -> bool:
    """Whether an agent's heartbeat snapshot reports the device available."""
    return any(d["device_id"] == device_id and d["status"] == "available" for d in agent_snapshot)
