"""The scheduler and the lease protocol as a state machine that hypothesis drives at random.

``ProtocolMachine`` calls the ``Store`` (every script of lua/, as the service does) with random
sequences of heartbeats, creates, claims, renewals, results, cancels and operators' steering, and
moves the clock the scripts read (``coordinator.clock.ShiftedClock``) across every deadline, so a
step may land between a deadline and the sweep that acts on it, with the sweep run or not. After
every step it reads everything stored under its prefix and checks the contract's invariants
(``invariants.py``) against Redis and against what the machine itself was told (``Told``): what
was acknowledged, which attempts were handed out, which answers were given. Each queued task's
``candidates`` and ``waiting_reason``, as the reads (and a create's answer) give them, are held
to the oracle's reading of what is stored.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from redis.asyncio import Redis

from coordinator.api.auth import HostPrincipal, token_digest
from coordinator.api.bodies import Agent, Heartbeat, TaskCreate
from coordinator.api.host import parse_capabilities, parse_snapshot
from coordinator.api.tasks import parse_task
from coordinator.api.validation import canonical_json
from coordinator.clock import ShiftedClock
from coordinator.errors import ApiError
from coordinator.state.keys import Keys
from coordinator.state.reads import Queries
from coordinator.state.records import DeviceState, TaskRecord
from coordinator.state.scripts import Script, load_scripts
from coordinator.state.store import Store
from coordinator.state.wait_reasons import waiting_reason
from coordinator.transport.base import PlainTransport
from tests.coordinator.invariants import (
    Stored,
    check_devices_read,
    check_stored,
    check_waiting_explained,
    host_online,
    host_runs,
    read_stored,
)
from tests.support import HOSTS, delete_prefix_async, unique_prefix

T = TypeVar("T")
_SCRIPTS: dict[str, Script] = {}


def scripts() -> dict[str, Script]:
    """lua/, read once per test session."""
    if not _SCRIPTS:
        _SCRIPTS.update(load_scripts())
    return _SCRIPTS

# Deadlines crossed by a step, apart enough to land between them; and far beyond the real time a
# sequence takes (Redis TIME moves on under the shifted clock: seconds, on a loaded cluster), so
# only the steps cross them. A deadline real time could cross would answer a replay of the same
# sequence differently, and hypothesis fails a sequence whose draws and preconditions change.
LEASE_TTL_MS = 20_000
CLAIM_TIMEOUT_MS = 40_000
OFFLINE_AFTER_MS = 60_000
RETENTION_MS = 200_000
QUEUE_TIMEOUTS_S = [None, 80, 400]  # None: the default, far beyond any run
DEFAULT_QUEUE_TIMEOUT_MS = 7 * 24 * 3_600_000
# A clock step: a little, or just past one of the deadlines.
STEPS_MS = [1, 200, LEASE_TTL_MS + 1, CLAIM_TIMEOUT_MS + 1, OFFLINE_AFTER_MS + 1, 80_001, RETENTION_MS + 1]

# The fleet the machine can report: host -> device -> (driver, labels). Small, so that random
# sequences often aim several calls at the same device.
# "managed" is an enrolled host: its devices are local ids, pooled under the cloud ids that
# enrolling them gives (a forgotten device enrolls again under a new one).
FLEET: dict[str, dict[str, tuple[str, dict[str, str]]]] = {
    "host-a": {"a1": ("sim", {"rack": "1"}), "a2": ("sim", {})},
    "host-b": {"b1": ("sim", {"rack": "2"}), "b2": ("adb", {})},
    "managed": {"m1": ("sim", {"rack": "1"}), "m2": ("adb", {})},
}
MANAGED = "managed"
STATIC = sorted(host for host in FLEET if host != MANAGED)
# The labels a relabelled device may get.
RELABELS: list[dict[str, str]] = [{}, {"rack": "1"}, {"rack": "2"}, {"rack": "1", "os": "14"}]
DEVICE_IDS = sorted(d for host, devices in FLEET.items() if host != MANAGED for d in devices)
TARGETS: list[dict[str, Any]] = [
    *({"device_id": d} for d in DEVICE_IDS),
    {"selector": {"driver": "sim"}},
    {"selector": {"driver": "sim", "labels": {"rack": "1"}}},
    {"selector": {"driver": "sim", "labels": {"os": "14", "rack": "1"}}},
    {"selector": {"driver": "adb"}},
    {"selector": {"driver": "ios"}},  # nothing will ever match it
    {"managed device": "m1"},  # the managed host's m1, by the cloud id it has now
]
# What a task asks to run: a goal (any host), or a workflow, which runs only where its host lists
# it or lists nothing. What a heartbeat says its host can run: nothing said (an older agent), or
# these workflows.
KINDS: list[dict[str, Any]] = [
    {"kind": "goal", "goal": "Turn on airplane mode"},
    {"kind": "workflow", "workflow": {"name": "note-smoke", "params": {}}},
    {"kind": "workflow", "workflow": {"name": "factory-reset", "params": {}}},
]
CAPABILITIES: list[tuple[str, ...] | None] = [None, (), ("note-smoke",), ("note-smoke", "factory-reset")]
# Sharing the fleet: the teams a task may belong to, the priorities it may have, and what an admin
# may set of a team (PROTOCOL.md, "Sharing the fleet").
TEAMS = ["default", "red", "blue"]
PRIORITIES = [0, 0, 5, -5]
WEIGHTS = [1, 2, 3]
CAPS: list[int | None] = [None, 0, 1, 2]
# Runs (PROTOCOL.md, "Runs"): a matrix's selector, as its devices are matched when it is created.
MATRIX_DEVICES: list[dict[str, Any]] = [{"driver": "sim"}, {"driver": "sim", "labels": {"rack": "1"}},
                                        {"driver": "ios"}]


MANAGED_TOKEN = "tht_" + "m" * 40


@dataclass(frozen=True)
class Handed:
    """An assignment a claim (or a result's eager dispatch) handed out."""

    host_id: str
    task_id: str
    attempt: int
    lease_id: str
    device_id: str


@dataclass
class Told:
    """What the service told the machine, to hold its later answers to."""

    created: dict[str, dict[str, Any]] = field(default_factory=dict)  # task id -> its create body
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)  # idempotency key -> (body, task id)
    handed: list[Handed] = field(default_factory=list)
    newest_attempt: dict[str, int] = field(default_factory=dict)  # task id -> newest attempt handed out
    claims: dict[tuple[str, str], Handed] = field(default_factory=dict)  # (host, claim id) -> first answer
    eager: dict[tuple[str, str], Handed] = field(default_factory=dict)  # (task, lease) -> what its result dispatched
    results: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict)  # (task, lease) -> (report, answer)
    revoked: set[str] = field(default_factory=set)
    runs: list[str] = field(default_factory=list)  # the runs created, in order


class ProtocolMachine(RuleBasedStateMachine):
    """Set ``redis_factory`` (a callable giving a fresh client) before running, and
    ``transport_factory`` when the client needs another transport than a plain one (a cluster)."""

    redis_factory: Any = None
    transport_factory: Any = PlainTransport

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.redis: Redis = self.loop.run_until_complete(self._client())
        self.keys = Keys(unique_prefix())
        self.clock = ShiftedClock()
        self.transport = transport = type(self).transport_factory(self.redis)
        self.store = Store(transport, self.keys, host_offline_after_ms=OFFLINE_AFTER_MS,
                           claim_timeout_ms=CLAIM_TIMEOUT_MS, retention_ms=RETENTION_MS, scripts=scripts(),
                           clock=self.clock)
        self.queries = Queries(transport, self.store.deployment, scripts=scripts(), clock=self.clock)
        self.told = Told()
        self.cloud: dict[str, str] = {}  # the managed host's local device id -> its cloud id
        # The fleet as it is now: devices change labels and static devices change hosts (relabel,
        # hand_over), starting from FLEET.
        self.fleet: dict[str, dict[str, tuple[str, dict[str, str]]]] = {
            host: dict(devices) for host, devices in FLEET.items()}
        self.reported: dict[str, list[dict[str, Any]]] = {}  # host -> the devices it last reported
        self.snapshots: dict[str, tuple[str, str]] = {}  # host -> the last snapshot and capabilities sent
        self.counter = itertools.count()
        self.before: Stored | None = None
        # A create's answer that queued its task: (task id, candidates).
        self.created_waiting: tuple[str, dict[str, Any]] | None = None
        self.run(self.store.load_scripts())
        token = "tet_" + self.fresh("enrollment")
        self.run(self.store.create_enrollment_token("et_1", token_digest(token), 3_600_000, 1, "{}"))
        self.managed_id, _ = self.run(self.store.enroll_host(
            token_digest(token), "e-1", token_digest(MANAGED_TOKEN), "h_managed", "lab-pc", "{}"))

    async def _client(self) -> Redis:
        """The client, made inside the machine's loop (a cluster client binds to the loop)."""
        return self.redis_factory()  # type: ignore[no-any-return]

    def principal(self, host: str) -> HostPrincipal:
        if host == MANAGED:
            return HostPrincipal(self.managed_id, "enrolled", token_digest(MANAGED_TOKEN))
        return HostPrincipal(host, "static", token_digest(HOSTS[host]))

    def run(self, call: Awaitable[T]) -> T:
        return self.loop.run_until_complete(call)

    def attempt(self, call: Awaitable[T]) -> T | ApiError:
        """The call's answer, or the contract's error it raised."""
        try:
            return self.run(call)
        except ApiError as exc:
            return exc

    def teardown(self) -> None:
        try:
            self.run(delete_prefix_async(self.redis, self.keys.prefix))
            self.run(self.transport.aclose())
            self.run(self.redis.aclose())
        finally:
            self.loop.close()

    def fresh(self, kind: str) -> str:
        return f"{kind}-{next(self.counter)}"

    # -- hosts ---------------------------------------------------------------------------

    # (Few rules, each with its variants as an argument: hypothesis turns whole rules off at
    # random in each sequence, so a variant of its own would often never run.)
    @rule(host=st.sampled_from(sorted(FLEET)), how=st.sampled_from(["all available", "any", "unchanged"]),
          can_run=st.sampled_from(CAPABILITIES), data=st.data())
    def heartbeat(self, host: str, how: str, can_run: tuple[str, ...] | None, data: st.DataObject) -> None:
        """A snapshot: every device available; any subset of the devices (none, some missing),
        each in any status; or the same snapshot as last time. Its agent lists the workflows
        ``can_run``, or (None) lists nothing."""
        if how == "unchanged" and host in self.snapshots:
            self._heartbeat(host, *self.snapshots[host])
            return
        if how == "any":
            if not self.fleet[host]:
                return
            chosen = data.draw(st.lists(st.sampled_from(sorted(self.fleet[host])), unique=True), label="devices")
            statuses = st.sampled_from(["available", "busy", "unavailable"])
            devices = [self._device(host, d, data.draw(statuses, label=d)) for d in chosen]
        else:
            devices = [self._device(host, d, "available") for d in sorted(self.fleet[host])]
        self._send_snapshot(host, devices, can_run)

    @rule(host=st.sampled_from(sorted(FLEET)), labels=st.sampled_from(RELABELS), data=st.data())
    def relabel(self, host: str, labels: dict[str, str], data: st.DataObject) -> None:
        """A device gets other labels (re-flashed, its agent restarted with new ones): the host's
        next heartbeat reports it so, every device available, its workflows as last sent."""
        if not self.fleet[host]:
            return
        device = data.draw(st.sampled_from(sorted(self.fleet[host])), label="device")
        self.fleet[host][device] = (self.fleet[host][device][0], labels)
        self._send_snapshot(host, [self._device(host, d, "available") for d in sorted(self.fleet[host])],
                            self._last_can_run(host))

    @rule(data=st.data())
    def hand_over(self, data: st.DataObject) -> None:
        """A static device moves to another static host (its USB cable moved): the new host
        reports it, which the coordinator accepts once its old host is offline; the old host stops
        reporting it."""
        device = data.draw(st.sampled_from(sorted(d for h in STATIC for d in self.fleet[h])), label="device")
        old = next(h for h in STATIC if device in self.fleet[h])
        new = data.draw(st.sampled_from([h for h in STATIC if h != old]), label="to")
        self.fleet[new][device] = self.fleet[old].pop(device)
        self._send_snapshot(old, [self._device(old, d, "available") for d in sorted(self.fleet[old])],
                            self._last_can_run(old))
        self._send_snapshot(new, [self._device(new, d, "available") for d in sorted(self.fleet[new])],
                            self._last_can_run(new))

    def _last_can_run(self, host: str) -> tuple[str, ...] | None:
        """The workflows the host's agent last listed (None: it listed nothing)."""
        sent = self.snapshots.get(host, ("", ""))[1]
        return None if not sent else tuple(orjson.loads(sent)["workflows"])

    @precondition(lambda self: bool(self.reported))
    @rule(data=st.data())
    def relist(self, data: st.DataObject) -> None:
        """A heartbeat with the same devices as the host's last one, its agent now listing other
        workflows (one was added to its folder, or the agent was upgraded or downgraded)."""
        host = data.draw(st.sampled_from(sorted(self.reported)), label="host")
        sent = self.snapshots.get(host, ("", ""))[1]
        others = [c for c in CAPABILITIES if (canonical_json(self._capabilities(c)) if c is not None else "") != sent]
        self._send_snapshot(host, self.reported[host], data.draw(st.sampled_from(others), label="can run"))

    @staticmethod
    def _capabilities(can_run: tuple[str, ...]) -> dict[str, list[str]] | None:
        return parse_capabilities(Agent.model_validate({"capabilities": {"workflows": list(can_run)}}))

    def _device(self, host: str, device_id: str, status: str) -> dict[str, Any]:
        """A device as its host reports it: the managed host by cloud id (one it never got, for a
        device it has not enrolled: the coordinator must refuse the whole snapshot)."""
        driver, labels = self.fleet[host][device_id]
        if host == MANAGED:
            device_id = self.cloud.get(device_id, f"d_never_enrolled_{device_id}")
        return {"device_id": device_id, "driver": driver, "status": status, "labels": labels}

    def _send_snapshot(self, host: str, devices: list[dict[str, Any]], can_run: tuple[str, ...] | None) -> None:
        """As the heartbeat route builds them: the canonical snapshot and capabilities."""
        parsed = parse_snapshot(Heartbeat.model_validate({"devices": devices}), 100)
        agent: dict[str, Any] = {}
        if can_run is not None:
            agent["capabilities"] = self._capabilities(can_run)
        capabilities = canonical_json(agent["capabilities"]) if can_run is not None else ""
        self._heartbeat(host, canonical_json({"agent": agent, "devices": parsed}), capabilities)
        self.reported[host] = devices

    def _heartbeat(self, host: str, snapshot: str, capabilities: str) -> None:
        answer = self.attempt(self.store.heartbeat(self.principal(host), snapshot, capabilities))
        if host in self.told.revoked:
            assert isinstance(answer, ApiError) and answer.status_code == 401, answer
            return
        assert not isinstance(answer, ApiError) or answer.status_code == 409, answer
        if not isinstance(answer, ApiError):
            self.snapshots[host] = (snapshot, capabilities)

    # -- operators -----------------------------------------------------------------------

    @rule(aim=st.sampled_from(TARGETS), key=st.sampled_from([None, "k1", "k2"]),
          queue_timeout_s=st.sampled_from(QUEUE_TIMEOUTS_S), max_attempts=st.sampled_from([1, 2, 3]),
          what=st.sampled_from(KINDS), team=st.sampled_from(TEAMS), priority=st.sampled_from(PRIORITIES))
    def create(self, aim: dict[str, Any], key: str | None, queue_timeout_s: int | None, max_attempts: int,
               what: dict[str, Any], team: str, priority: int) -> None:
        if "managed device" in aim:
            aim = {"device_id": self.cloud.get(aim["managed device"], "d_never_enrolled")}
        body = {**what, "max_attempts": max_attempts, **aim, "team": team, "priority": priority}
        if queue_timeout_s is not None:
            body["queue_timeout_s"] = queue_timeout_s
        if key is not None:
            body["idempotency_key"] = key
        task = parse_task(TaskCreate.model_validate(body), DEFAULT_QUEUE_TIMEOUT_MS)
        task["id"] = "t_" + self.fresh("task")
        answer = self.attempt(self.store.create_task(task))
        earlier = self.told.keys.get(key) if key is not None else None
        live = earlier is not None and earlier[1] in self.stored().tasks
        if isinstance(answer, ApiError):
            # only a key already used for another request that still lives may refuse a create
            assert live and earlier is not None and earlier[0] != canonical_json(body), answer
            assert answer.code == "idempotency_conflict"
            return
        if live and earlier is not None and earlier[0] == canonical_json(body):
            assert not answer.created and answer.task.id == earlier[1], "an idempotent replay is the first task"
            return
        assert answer.created and answer.task.id == task["id"]
        assert (answer.candidates is not None) == (answer.task.status == "queued"), answer
        if answer.candidates is not None:
            self.created_waiting = (task["id"], answer.candidates)
        self.told.created[task["id"]] = body
        if key is not None:
            self.told.keys[key] = (canonical_json(body), task["id"])

    @rule(action=st.sampled_from(["cancel", "drain", "undrain", "disable", "enable", "forget", "revoke"]),
          host=st.sampled_from(sorted(FLEET)), data=st.data())
    def steer(self, action: str, host: str, data: st.DataObject) -> None:
        """An operator: cancel a task, drain or undrain a host, disable, enable or forget a device,
        or (rarely: a revoked host never comes back) revoke a host."""
        device = data.draw(st.sampled_from(DEVICE_IDS + sorted(self.cloud.values())), label="device")
        if action == "cancel" and self.told.created:
            task_id = data.draw(st.sampled_from(sorted(self.told.created)), label="task")
            self.attempt(self.store.cancel_task(task_id))
        elif action in ("drain", "undrain"):
            self.run(self.store.set_host_draining(self.principal(host).host_id, action == "drain"))
        elif action in ("disable", "enable"):
            self.attempt(self.store.set_device_disabled(device, action == "disable", "cracked"))
        elif action == "forget":
            answer = self.attempt(self.store.forget_device(device))
            enrolled = device in self.cloud.values()
            if not isinstance(answer, ApiError):
                assert enrolled, "only an enrolled device can be forgotten"
                self.cloud = {local: cloud for local, cloud in self.cloud.items() if cloud != device}
            else:
                holder = self.stored().reservations.get(device)
                expected = "device_busy" if enrolled and holder else "not_found"
                assert answer.code == expected, (answer.code, expected)
        elif action == "revoke" and not self.told.revoked and data.draw(st.integers(0, 4), label="roll") == 0:
            static = None if host == MANAGED else self.principal(host).digest
            self.run(self.store.revoke_host(self.principal(host).host_id, static))
            self.told.revoked.add(host)

    @rule(aims=st.lists(st.sampled_from(TARGETS), min_size=1, max_size=3), what=st.sampled_from(KINDS),
          matrix=st.sampled_from([None, *MATRIX_DEVICES]), max_attempts=st.sampled_from([1, 2]),
          team=st.sampled_from(TEAMS), priority=st.sampled_from(PRIORITIES))
    def create_run(self, aims: list[dict[str, Any]], what: dict[str, Any], matrix: dict[str, Any] | None,
                   max_attempts: int, team: str, priority: int) -> None:
        """An operator submits a run: a task for each aim, or a matrix of one work item over the
        devices its selector matches now (lua/createRun; its specs as coordinator/api/runs.py
        builds them)."""
        run = {"id": "r_" + self.fresh("run"), "team": team, "priority": priority, "created_by": "admin"}
        if matrix is None:
            specs = []
            for aim in aims:
                if "managed device" in aim:
                    aim = {"device_id": self.cloud.get(aim["managed device"], "d_never_enrolled")}
                spec = parse_task(TaskCreate.model_validate({**what, **aim, "max_attempts": max_attempts}),
                                  DEFAULT_QUEUE_TIMEOUT_MS)
                specs.append({k: v for k, v in spec.items() if k not in ("team", "priority")})
            answer = self.attempt(self.store.create_run(run, specs, None, 1000))
        else:
            work = {k: v for k, v in parse_task(TaskCreate.model_validate({**what, "device_id": "x"}),
                                                DEFAULT_QUEUE_TIMEOUT_MS).items()
                    if k not in ("team", "priority", "target_device")}
            work["max_attempts"] = max_attempts
            spec = {"work": [work], "driver": matrix["driver"], "labels": canonical_json(matrix.get("labels", {}))}
            answer = self.attempt(self.store.create_run(run, [], spec, 1000))
        if isinstance(answer, ApiError):
            now = self.stored()
            # PROTOCOL.md, "Runs": a matrix takes the devices matching now that could run its work
            # now (busy ones too: their task waits its turn)
            work_item = {"kind": what["kind"], "workflow": orjson.dumps(what.get("workflow")).decode()}
            matching = [d for d, device in now.devices.items() if matrix is not None and d not in now.disabled
                        and device["driver"] == matrix["driver"] and device["status"] != "unavailable"
                        and host_online(now, device["host_id"], OFFLINE_AFTER_MS)
                        and device["host_id"] not in now.draining and device["host_id"] not in now.stalled
                        and host_runs(now, device["host_id"], work_item)
                        and all(orjson.loads(device.get("labels") or "{}").get(k) == v
                                for k, v in matrix.get("labels", {}).items())]
            assert answer.code == "no_matching_device" and matrix is not None and not matching, answer
            return
        assert answer.created and answer.run.status == "running"
        self.told.runs.append(run["id"])
        for place in range(answer.run.places):
            self.told.created[f"t_{run['id'][2:]}-{place + 1}"] = {"run_id": run["id"]}

    @rule(action=st.sampled_from(["cancel", "rerun"]), data=st.data())
    def steer_run(self, action: str, data: st.DataObject) -> None:
        """An operator cancels a run, or reruns its failed tasks."""
        if not self.told.runs:
            return
        run_id = data.draw(st.sampled_from(self.told.runs), label="run")
        if action == "cancel":
            answer: Any = self.attempt(self.store.cancel_run(run_id))
        else:
            answer = self.attempt(self.store.rerun_failed(run_id))
        if isinstance(answer, ApiError):
            assert answer.code == "not_found" and run_id not in self.stored().runs, answer
            return
        if action == "rerun":
            created, _ = answer
            minted = self.stored().runs[run_id]["minted"]
            for n in range(minted - created + 1, minted + 1):
                self.told.created[f"t_{run_id[2:]}-{n}"] = {"run_id": run_id}

    @rule(team=st.sampled_from(TEAMS), weight=st.sampled_from([None, *WEIGHTS]),
          cap=st.sampled_from(["keep", *CAPS]))
    def set_team(self, team: str, weight: int | None, cap: int | str | None) -> None:
        """An admin sets a team's weight, its cap, or both (a cap of None lifts it)."""
        change: dict[str, Any] = {}
        if weight is not None:
            change["weight"] = weight
        if cap != "keep":
            change["max_devices"] = cap
        share = self.run(self.store.set_team(team, change))
        assert share.team == team and (weight is None or share.weight == weight)
        assert cap == "keep" or share.max_devices == cap

    @rule(team=st.sampled_from(TEAMS), lift=st.sampled_from([None, 1]), data=st.data())
    def pause_queue_resume(self, team: str, lift: int | None, data: st.DataObject) -> None:
        """An admin pauses a team (a cap of 0), its work queues for several targets and priorities,
        and the cap is lifted or raised: the team's backlog is placed in PROTOCOL's order across
        its targets (placeTeamWork). Its work aims at the devices free now, when there are any,
        so its targets compete for them (and a cap of 1 leaves all but one waiting): an order
        read wrong places the wrong one."""
        aims = self._aims_at_free() or TARGETS
        # Indexes, not the aims themselves: what is free is Redis's state, and a draw whose shape
        # followed it would differ on a replay (hypothesis refuses such a sequence).
        picks = data.draw(st.lists(st.tuples(st.integers(0, len(TARGETS) - 1), st.sampled_from(PRIORITIES)),
                                   min_size=2, max_size=3), label="work")
        work = [(aims[i % len(aims)], priority) for i, priority in picks]
        self.set_team(team, None, 0)
        for aim, priority in work:
            self.create(aim, None, None, 1, KINDS[0], team, priority)
        self.created_waiting = None  # its answers were given before the cap was lifted
        self.set_team(team, None, lift)

    def _aims_at_free(self) -> list[dict[str, Any]]:
        """The aims of TARGETS that fit a device in the free index now. (Not held to the real
        clock's reading of its host's deadline: hypothesis replays a sequence's draws, and a
        list whose length followed the real clock would make a replay draw differently.)"""
        now = self.stored()
        free = [(d, now.devices[d]) for d in sorted(now.free) if d in now.devices]

        def fits_free(aim: dict[str, Any]) -> bool:
            if "selector" not in aim:
                device_id = aim.get("device_id") or self.cloud.get(aim["managed device"])
                return any(d == device_id for d, _ in free)
            wanted = aim["selector"].get("labels", {})
            return any(device["driver"] == aim["selector"]["driver"]
                       and all(orjson.loads(device.get("labels") or "{}").get(k) == v for k, v in wanted.items())
                       for _, device in free)

        return [aim for aim in TARGETS if fits_free(aim)]

    @rule(locals_=st.lists(st.sampled_from(sorted(FLEET[MANAGED])), min_size=1, unique=True))
    def enroll_devices(self, locals_: list[str]) -> None:
        """The managed host enrolls local devices: one it enrolled before keeps its cloud id."""
        batch = [{"local_id": local, "driver": FLEET[MANAGED][local][0], "attributes": "{}",
                  "new_id": "d_" + self.fresh("cloud")} for local in locals_]
        answer = self.attempt(self.store.enroll_devices(self.principal(MANAGED), batch, 10))
        if MANAGED in self.told.revoked:
            assert isinstance(answer, ApiError) and answer.status_code == 401, answer
            return
        assert not isinstance(answer, ApiError), answer
        for entry in answer:
            known = self.cloud.get(entry["local_id"])
            assert known is None or known == entry["device_id"], "an enrolled device keeps its id"
            self.cloud[entry["local_id"]] = entry["device_id"]

    # -- the lease protocol ---------------------------------------------------------------

    @rule(host=st.sampled_from(sorted(FLEET)), replay=st.booleans(), data=st.data())
    def claim(self, host: str, replay: bool, data: st.DataObject) -> None:
        earlier = sorted(claim_id for h, claim_id in self.told.claims if h == host)
        claim_id = data.draw(st.sampled_from(earlier), label="claim id") if replay and earlier else self.fresh("c")
        answer = self.attempt(self.store.claim(self.principal(host), claim_id, self.fresh("lease"), LEASE_TTL_MS))
        if isinstance(answer, ApiError):
            assert host in self.told.revoked and answer.status_code == 401, answer
            return
        first = self.told.claims.get((host, claim_id))
        if answer is None:
            return
        got = answer.assignment
        handed = Handed(host, got["task_id"], got["attempt"], got["lease_id"], got["device_id"])
        if first is not None:
            assert handed == first, "a replayed claim id answers what it first did"
            assert answer.waited_ms is None
            return
        assert got["attempt"] >= self.told.newest_attempt.get(got["task_id"], 0) + 1, "attempts only grow"
        self.told.newest_attempt[got["task_id"]] = got["attempt"]
        self.told.claims[(host, claim_id)] = handed
        self.told.handed.append(handed)

    @precondition(lambda self: bool(self.told.handed))
    @rule(data=st.data(), progress=st.booleans())
    def renew(self, data: st.DataObject, progress: bool) -> None:
        handed = data.draw(st.sampled_from(self.told.handed), label="lease")
        report = canonical_json({"step_index": 1, "status": "ok", "summary": "tapped"}) if progress else ""
        answer = self.attempt(self.store.renew(self.principal(handed.host_id), handed.lease_id, handed.task_id,
                                               handed.attempt, LEASE_TTL_MS, report))
        if handed.host_id in self.told.revoked:
            assert isinstance(answer, ApiError) and answer.status_code == 401, answer
            return
        if not isinstance(answer, ApiError):
            assert handed.attempt == self.told.newest_attempt[handed.task_id], \
                "no renewal is accepted for an attempt after a newer one was handed out"
            task = self.stored().tasks[handed.task_id]
            assert task["status"] == "running" and task["lease_id"] == handed.lease_id

    @precondition(lambda self: bool(self.told.handed))
    @rule(data=st.data(), outcome=st.sampled_from(["succeeded", "failed", "retryable", "replay", "conflict"]),
          eager=st.booleans())
    def result(self, data: st.DataObject, outcome: str, eager: bool) -> None:
        """A result, asking for the device's next assignment (eager dispatch) or not."""
        reported = [h for h in self.told.handed if (h.task_id, h.lease_id) in self.told.results]
        if outcome in ("replay", "conflict") and reported:  # again, for a lease that reported
            handed = data.draw(st.sampled_from(reported), label="lease")
        else:
            handed = data.draw(st.sampled_from(self.told.handed), label="lease")
        self._result(handed, outcome, eager)

    @precondition(lambda self: bool(self.told.handed))
    @rule(data=st.data(), team=st.sampled_from(TEAMS), priority=st.sampled_from(PRIORITIES),
          replay=st.booleans())
    def busy_device(self, data: st.DataObject, team: str, priority: int, replay: bool) -> None:
        """A busy device: work queues for a device while it runs a task, whose result then asks
        for the next (eager dispatch), and may be sent again (a lost answer)."""
        stored = self.stored().tasks
        running = [h for h in self.told.handed if stored.get(h.task_id, {}).get("lease_id") == h.lease_id
                   and stored[h.task_id]["status"] == "running"]
        if not running:
            return
        handed = data.draw(st.sampled_from(running), label="lease")
        self.create({"device_id": handed.device_id}, None, None, 1, KINDS[0], team, priority)
        self.created_waiting = None  # its answer was given before the result freed the device
        self._result(handed, "succeeded", True)
        if replay:
            self._result(handed, "replay", True)

    def _result(self, handed: Handed, outcome: str, eager: bool) -> None:
        recorded = self.told.results.get((handed.task_id, handed.lease_id))
        if outcome in ("replay", "conflict") and recorded is None:
            outcome = "succeeded"
        if outcome == "replay" and recorded is not None:
            report = recorded[0]
        elif outcome == "conflict" and recorded is not None:
            report = canonical_json({"status": "failed", "failure_reason": f"other {self.fresh('r')}", "metadata": None})
        else:
            status = "succeeded" if outcome == "succeeded" else "failed"
            value: dict[str, Any] = {"status": status, "failure_reason": None if status == "succeeded" else "crashed",
                                     "metadata": {"steps": 3}}
            if outcome == "retryable":
                value["retryable"] = True
            report = canonical_json(value)
        answer = self.attempt(self.store.record_result(
            self.principal(handed.host_id), handed.task_id, handed.attempt, handed.lease_id, report,
            next_lease_id=self.fresh("lease") if eager else "", ttl_ms=LEASE_TTL_MS))
        if handed.host_id in self.told.revoked:  # a revoked credential is refused before anything else
            assert isinstance(answer, ApiError) and answer.status_code == 401, answer
            return
        if recorded is not None:
            if report == recorded[0]:
                assert not isinstance(answer, ApiError) or answer.code == "lease_not_owned", answer
                if not isinstance(answer, ApiError):  # (unless retention deleted the task)
                    assert answer.replayed and (answer.recorded_at_ms, answer.task_status) == recorded[1], \
                        "an identical replay gets the recorded answer"
                    self._replayed_next(handed, answer.next if eager else None)
            else:
                assert isinstance(answer, ApiError) and answer.code in ("result_conflict", "lease_not_owned"), answer
            return
        if isinstance(answer, ApiError):
            return
        assert not answer.replayed
        assert handed.attempt == self.told.newest_attempt[handed.task_id], \
            "no result is accepted for an attempt after a newer one was handed out"
        self.told.results[(handed.task_id, handed.lease_id)] = (report, (answer.recorded_at_ms, answer.task_status))
        if answer.next is None:
            return
        assert eager and answer.task_status != "queued", "only a result asking for it, not a retry, dispatches"
        got = answer.next.assignment
        following = Handed(handed.host_id, got["task_id"], got["attempt"], got["lease_id"], got["device_id"])
        assert following.device_id == handed.device_id, "eager dispatch hands over the freed device"
        assert got["attempt"] >= self.told.newest_attempt.get(got["task_id"], 0) + 1, "attempts only grow"
        task = self.stored().tasks[got["task_id"]]
        assert (task["status"], task["lease_id"], task["device_id"]) == ("running", got["lease_id"], handed.device_id)
        self.told.newest_attempt[got["task_id"]] = got["attempt"]
        self.told.handed.append(following)
        self.told.eager[(handed.task_id, handed.lease_id)] = following

    def _replayed_next(self, handed: Handed, dispatched: Any) -> None:
        """A replayed result never hands out a second lease: the next assignment its first
        recording dispatched, while that lease is live, else none."""
        first = self.told.eager.get((handed.task_id, handed.lease_id))
        if dispatched is None:
            return  # its lease ended (or none was dispatched, or `next` was not asked)
        got = dispatched.assignment
        assert first == Handed(handed.host_id, got["task_id"], got["attempt"], got["lease_id"], got["device_id"]), \
            "a replayed result answers the next assignment its first recording dispatched"
        task = self.stored().tasks[got["task_id"]]
        assert task["status"] == "running" and task["lease_id"] == got["lease_id"], "and only while it lives"

    # -- time and the reaper ------------------------------------------------------------

    @rule(ms=st.sampled_from(STEPS_MS))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(sweep=st.sampled_from(["expire_leases", "expire_hosts", "expire_assignments", "expire_queued",
                                 "purge_tasks", "place_left_over"]))
    def sweep(self, sweep: str) -> None:
        self.run(getattr(self.store, sweep)(100))

    # -- after every step -----------------------------------------------------------------

    def stored(self) -> Stored:
        return self.run(read_stored(self.redis, self.keys, self.queries))

    @invariant()
    def the_contract_holds(self) -> None:
        now = self.stored()
        check_stored(now, self.before, OFFLINE_AFTER_MS, self.told.created)
        for task_id, task in now.tasks.items():
            assert task["attempt"] >= self.told.newest_attempt.get(task_id, 0), "attempts only grow"
        self._check_reads(now)
        self.before = now

    def _check_reads(self, now: Stored) -> None:
        """The queued tasks' candidates as the reads answer them, the last create's own, and the
        pool as the reads answer it, held to the oracle; skipped when a host crossed its offline
        deadline while they were read (the real clock runs on between the reading and the
        answers; a create ran after the previous reading, with no clock step between)."""
        created, self.created_waiting = self.created_waiting, None
        queued = [TaskRecord.from_json(orjson.dumps(t)) for t in now.tasks.values() if t["status"] == "queued"]

        async def read() -> tuple[dict[str, dict[str, Any]], list[DeviceState], int]:
            candidates, pool = await asyncio.gather(self.queries.candidates(queued),
                                                    self.queries.devices(sorted(now.devices)))
            return candidates, pool, await self.queries.redis_time_ms()

        candidates, pool, answered = self.run(read())
        assert set(candidates) == {t.id for t in queued}, "the reads explain every queued task"
        if not self._steady(now, now.now_ms if created is None or self.before is None else self.before.now_ms,
                            answered):
            return
        reasons = {task_id: waiting_reason(counts) for task_id, counts in candidates.items()}
        check_waiting_explained(now, OFFLINE_AFTER_MS, candidates, reasons)
        if created is not None:
            task_id, counts = created
            check_waiting_explained(now, OFFLINE_AFTER_MS, {task_id: counts}, {task_id: waiting_reason(counts)})
        check_devices_read(now, OFFLINE_AFTER_MS, pool)

    @staticmethod
    def _steady(now: Stored, start_ms: int, end_ms: int) -> bool:
        """Whether no host's online standing changed between the two times."""
        return all((seen > start_ms - OFFLINE_AFTER_MS) == (seen > end_ms - OFFLINE_AFTER_MS)
                   for seen in now.online.values())
