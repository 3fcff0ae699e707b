"""The contract's invariants over what Redis stores, by the layout's own rules (docs/redis-keys.md).

``read_stored`` reads every key of a deployment; ``check_stored`` asserts, of one reading and the
one before it:
- each index agrees with the records (statuses, waiting queues and their targets, assignments,
  leases, deadlines, reservations, the free index by driver and label, a host's devices, the
  driver index);
- no queued task waits beside a device it could run on (a free, available, enabled device of an
  online host, by the offline deadline itself, that is neither draining nor stalled, and that
  lists the task's workflow or lists nothing);
- each queued task's candidates and waiting reason, as the reads answer them, say the same
  (``check_waiting_explained``, given those answers), and so does the pool as the reads answer
  it (``check_devices_read``);
- an assignment waiting for its claim is one its host may run;
- the order across targets: a task assigned (or eagerly dispatched, PROTOCOL.md results) in this
  step left queued no task that could have run on its device of higher priority (its team not at
  quota), nor an older one of its team and priority;
- a new task placed on a free device took, of those it could run on, the one idle longest;
- a device holds at most one task, a task at most one live lease;
- every acknowledged create is stored, or was terminal and purged after its retention, and then
  nothing of it is left behind.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
from redis.asyncio import Redis

from coordinator.state.keys import STATUS_CODES, STATUS_SPAN, Keys, label_index
from coordinator.state.reads import Queries
from coordinator.state.records import DeviceState
from tests.support import glob_escape

TERMINAL = {"succeeded", "failed", "cancelled"}


def _text(value: bytes) -> str:
    return value.decode()


@dataclass
class Stored:
    now_ms: int
    tasks: dict[str, dict[str, Any]]
    by_status: dict[str, float]
    devices: dict[str, dict[str, Any]]
    reservations: dict[str, str]
    free: set[str]  # the free devices' ids (free_devices:<driver>)
    free_since: dict[str, float]  # a free device -> since when it is free (its score there)
    placing_teams: set[str]  # teams whose placement stopped at a step's bound, for the reaper
    refresh_devices: set[str]  # devices a step could not feed past its bound, for the reaper
    free_index: dict[str, set[str]]  # each free set (free_devices:<driver>, free_label:<index>) -> ids
    pooled_index: dict[str, set[str]]  # pooled_label:<index> -> the pooled devices with that label
    by_driver: set[str]
    disabled: set[str]
    draining: set[str]
    stalled: set[str]
    online: dict[str, float]
    seen: dict[str, float]  # host id -> its last heartbeat as host_state:<host> holds it
    host_devices: dict[str, set[str]]
    waiting: dict[str, dict[str, float]]  # key kind:id -> task id -> seq
    targets: dict[str, dict[str, Any]]  # target id -> what it asks (lua/includes/placement.lua)
    target_ids: dict[str, str]  # spec -> target id
    target_indexes: dict[str, set[str]]  # kind:id of device_, driver_ and label_targets -> target ids
    target_teams: dict[str, dict[str, float]]  # target id -> team -> its head's score
    team_targets: dict[str, dict[str, float]]  # team -> target id -> its head's score
    assigned: dict[str, list[str]]
    lease_deadlines: dict[str, float]
    claim_deadlines: dict[str, float]
    queue_deadlines: dict[str, float]
    retention: dict[str, float]
    idempotency: dict[str, str]
    claims: dict[str, dict[str, Any]]
    progress: set[str]
    lease_keys: dict[str, dict[str, Any]]  # task id -> its lease key's value
    # host id -> the workflows it lists; a host with no entry listed nothing (it runs anything)
    capabilities: dict[str, set[str]]
    # the teams hash: "<team>" -> settings JSON, "<team>|running" and "<team>|queued" -> counts
    teams: dict[str, str] = field(default_factory=dict)
    # runs: run id -> its record, its counts (run_counts) and its tasks by place (run_tasks)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    run_tasks: dict[str, dict[str, float]] = field(default_factory=dict)


async def read_stored(redis: Redis, keys: Keys, queries: Queries) -> Stored:
    """Everything stored under the deployment's base, in one pipeline after the scan that finds the
    keys of one id (the model reads it after every step: its round trips are the test's time)."""
    now_ms = await queries.redis_time_ms()
    per_id = [_text(raw) async for raw in redis.scan_iter(match=glob_escape(keys.base) + "*", count=1000)]
    read: list[tuple[str, str]] = []  # (kind, id) of each per-id key read, in pipeline order
    async with redis.pipeline(transaction=False) as pipe:
        for key in per_id:
            name = key[len(keys.base):]
            kind, _, ident = name.partition(":")
            if kind == "host_devices":
                pipe.smembers(key)
            elif kind in ("waiting", "free_devices", "free_label", "pooled_label", "target_teams", "team_targets"):
                pipe.zrange(key, 0, -1, withscores=True)
                ident = name if kind in ("waiting", "free_devices", "free_label", "pooled_label") else ident
            elif kind in ("device_targets", "driver_targets", "label_targets"):
                pipe.smembers(key)
                ident = name
            elif kind == "assigned":
                pipe.lrange(key, 0, -1)
            elif kind == "lease":
                pipe.get(key)
            elif kind in ("run_counts", "host_state"):
                pipe.hgetall(key)
            elif kind == "run_tasks":
                pipe.zrange(key, 0, -1, withscores=True)
            else:
                continue
            read.append((kind, ident))
        for key in (keys.tasks, keys.devices, keys.reservations, keys.idempotency, keys.claims,
                    keys.teams, keys.runs, keys.targets, keys.target_ids):
            pipe.hgetall(key)
        for key in (keys.tasks_by_status, keys.devices_by_driver, keys.hosts_online, keys.lease_deadlines,
                    keys.claim_deadlines, keys.queue_deadlines, keys.retention, keys.placing_teams,
                    keys.refresh_devices):
            pipe.zrange(key, 0, -1, withscores=True)
        for key in (keys.disabled_devices, keys.progress):
            pipe.hkeys(key)
        replies = await pipe.execute()

    host_devices: dict[str, set[str]] = {}
    waiting: dict[str, dict[str, float]] = {}
    assigned: dict[str, list[str]] = {}
    lease_keys: dict[str, dict[str, Any]] = {}
    run_counts: dict[str, dict[str, int]] = {}
    run_tasks: dict[str, dict[str, float]] = {}
    host_state: dict[str, dict[str, str]] = {}
    free_index: dict[str, set[str]] = {}
    free_since: dict[str, float] = {}
    pooled_index: dict[str, set[str]] = {}
    target_indexes: dict[str, set[str]] = {}
    target_teams: dict[str, dict[str, float]] = {}
    team_targets: dict[str, dict[str, float]] = {}
    for (kind, ident), reply in zip(read, replies, strict=False):
        if kind == "host_devices":
            host_devices[ident] = {_text(m) for m in reply}
        elif kind == "waiting":
            waiting[ident] = {_text(m): s for m, s in reply}
        elif kind in ("free_devices", "free_label"):
            free_index[ident] = {_text(m) for m, _ in reply}
            if kind == "free_devices":
                free_since.update({_text(m): score for m, score in reply})
        elif kind == "pooled_label":
            pooled_index[ident] = {_text(m) for m, _ in reply}
        elif kind in ("device_targets", "driver_targets", "label_targets"):
            target_indexes[ident] = {_text(m) for m in reply}
        elif kind == "target_teams":
            target_teams[ident] = {_text(m): s for m, s in reply}
        elif kind == "team_targets":
            team_targets[ident] = {_text(m): s for m, s in reply}
        elif kind == "assigned":
            assigned[ident] = [_text(t) for t in reply]
        elif kind == "run_counts":
            run_counts[ident] = {_text(k): int(v) for k, v in reply.items()}
        elif kind == "run_tasks":
            run_tasks[ident] = {_text(m): score for m, score in reply}
        elif kind == "host_state":
            host_state[ident] = {_text(k): _text(v) for k, v in reply.items()}
        elif reply is not None:  # a lease key (its TTL may run out between the scan and the read)
            lease_keys[ident] = orjson.loads(reply)
    (tasks, devices, reservations, idempotency, claims, teams, runs, targets, target_ids, by_status, by_driver, online,
     lease_deadlines, claim_deadlines, queue_deadlines, retention, placing_teams, refresh_devices, disabled,
     progress) = replies[len(read):]

    def zset(reply: list[tuple[bytes, float]]) -> dict[str, float]:
        return {_text(m): s for m, s in reply}

    return Stored(
        now_ms=now_ms,
        tasks={_text(k): orjson.loads(v) for k, v in tasks.items()},
        by_status=zset(by_status),
        devices={_text(k): orjson.loads(v) for k, v in devices.items()},
        reservations={_text(k): _text(v) for k, v in reservations.items()},
        free={m for key, ids in free_index.items() if key.startswith("free_devices:") for m in ids},
        free_index=free_index,
        placing_teams=set(zset(placing_teams)),
        refresh_devices=set(zset(refresh_devices)),
        free_since=free_since,
        pooled_index=pooled_index,
        by_driver=set(zset(by_driver)),
        disabled={_text(k) for k in disabled},
        draining={h for h, state in host_state.items() if "draining" in state},
        stalled={h for h, state in host_state.items() if "stalled" in state},
        seen={h: float(state["seen"]) for h, state in host_state.items() if "seen" in state},
        online=zset(online),
        host_devices=host_devices,
        waiting=waiting,
        targets={_text(k): orjson.loads(v) for k, v in targets.items()},
        target_ids={_text(k): _text(v) for k, v in target_ids.items()},
        target_indexes=target_indexes,
        target_teams=target_teams,
        team_targets=team_targets,
        assigned=assigned,
        lease_deadlines=zset(lease_deadlines),
        claim_deadlines=zset(claim_deadlines),
        queue_deadlines=zset(queue_deadlines),
        retention=zset(retention),
        idempotency={_text(k): _text(v) for k, v in idempotency.items()},
        claims={_text(k): orjson.loads(v) for k, v in claims.items()},
        progress={_text(k) for k in progress},
        lease_keys=lease_keys,
        capabilities={h: set(orjson.loads(state["capabilities"])["workflows"])
                      for h, state in host_state.items() if "capabilities" in state},
        teams={_text(k): _text(v) for k, v in teams.items()},
        runs={_text(k): orjson.loads(v) for k, v in runs.items()},
        run_counts=run_counts,
        run_tasks=run_tasks,
    )


def member(driver: str, device_id: str) -> str:
    return f"{driver}\0{device_id}"


def waiting_key(task: dict[str, Any]) -> str:
    """The queue a queued task waits in: its target's (the record names it), for its team."""
    return f"waiting:{task['target_id']}|{team_of(task)}"


def workflow_name(task: dict[str, Any]) -> str | None:
    return orjson.loads(task["workflow"])["name"] if task.get("kind") == "workflow" else None


def target_of(task: dict[str, Any]) -> dict[str, Any]:
    """What a task asks of a device, as placement interns it as a target."""
    if task.get("target_device"):
        return {"target_device": task["target_device"], "workflow": workflow_name(task)}
    return {"driver": task["driver"], "labels": task.get("labels") or "{}", "workflow": workflow_name(task)}


def target_index(target: dict[str, Any]) -> str:
    """The index a freed device finds the target in (lua/includes/placement.lua, targetIndexKey):
    by one of its own labels, the one it names (`indexed`), or (interned before that) its first."""
    if target.get("target_device"):
        return f"device_targets:{target['target_device']}"
    labels = orjson.loads(target["labels"])
    if not labels:
        assert "indexed" not in target, target
        return f"driver_targets:{target['driver']}"
    if "indexed" in target:
        assert target["indexed"] in {label_index(target["driver"], k, v) for k, v in labels.items()}, target
        return f"label_targets:{target['indexed']}"
    first = min(labels)
    return f"label_targets:{label_index(target['driver'], first, labels[first])}"


def queue_score(task: dict[str, Any]) -> float:
    """Its score in its queue: higher priority first, then older (lua/includes/placement.lua)."""
    return (100 - task.get("priority", 0)) * 2**44 + task["seq"]


def fits(task: dict[str, Any], device_id: str, device: dict[str, Any]) -> bool:
    """Whether the device is one the task's target names."""
    if task.get("target_device"):
        return task["target_device"] == device_id
    wanted = orjson.loads(task.get("labels") or "{}")
    have = orjson.loads(device.get("labels") or "{}")
    return task["driver"] == device["driver"] and all(have.get(k) == v for k, v in wanted.items())


def host_runs(s: Stored, host_id: str, task: dict[str, Any]) -> bool:
    """A goal runs on any host; a workflow on one that lists it, or lists nothing (older agents)."""
    listed = s.capabilities.get(host_id)
    if listed is None or task.get("kind") != "workflow":
        return True
    return orjson.loads(task["workflow"])["name"] in listed


def host_online(s: Stored, host_id: str, offline_after_ms: int) -> bool:
    """The one predicate of "online": a heartbeat within the offline threshold."""
    seen = s.online.get(host_id)
    return seen is not None and seen > s.now_ms - offline_after_ms


def could_run_now(s: Stored, device_id: str, offline_after_ms: int) -> bool:
    device = s.devices[device_id]
    host = device["host_id"]
    return (device["status"] == "available" and device_id not in s.reservations and device_id not in s.disabled
            and host_online(s, host, offline_after_ms) and host not in s.draining and host not in s.stalled)


def check_indexes(s: Stored) -> None:
    assert set(s.by_status) == set(s.tasks), "tasks_by_status holds every task, once"
    for task_id, task in s.tasks.items():
        status = task["status"]
        assert s.by_status[task_id] == STATUS_CODES[status] * STATUS_SPAN + task["seq"], (task_id, status)
        in_waiting = [key for key, queued in s.waiting.items() if task_id in queued]
        in_assigned = [h for h, ids in s.assigned.items() for t in ids if t == task_id]
        holds = [d for d, t in s.reservations.items() if t == task_id]
        assert (task_id in s.lease_deadlines) == (status == "running"), (task_id, status, "lease deadline")
        assert (task_id in s.claim_deadlines) == (status == "assigned"), (task_id, status, "claim deadline")
        assert (task_id in s.retention) == (status in TERMINAL), (task_id, status, "retention")
        if status == "queued":
            assert in_waiting == [waiting_key(task)] and s.waiting[in_waiting[0]][task_id] == queue_score(task), \
                (task_id, in_waiting)
            assert not in_assigned and not holds, task_id
            assert (task_id in s.queue_deadlines) == bool(task.get("queue_deadline")), task_id
        else:
            assert not in_waiting and task_id not in s.queue_deadlines, (task_id, status, in_waiting)
        if status == "assigned":
            assert in_assigned == [task["host_id"]], (task_id, in_assigned)
        else:
            assert not in_assigned, (task_id, status, in_assigned)
        if status in ("assigned", "running"):
            assert holds == [task["device_id"]], (task_id, status, holds)
        else:
            assert not holds, (task_id, status, holds)
        if status in ("queued", "assigned"):  # an ended task may keep its last progress until retention
            assert task_id not in s.progress, (task_id, status, "progress")
    for task_id, held in s.lease_keys.items():
        # A lease key names the running attempt's lease, or is gone (its TTL runs on the real clock,
        # not on the test's moved one); the step it holds is the one stored as the task's progress.
        task = s.tasks.get(task_id)
        assert task is not None and task["status"] == "running", (task_id, "lease key of no running task")
        lease = {name: value for name, value in held.items() if name != "progress"}
        assert lease == {"lease_id": task["lease_id"], "host_id": task["host_id"], "attempt": task["attempt"]}, \
            (task_id, held)
        assert "progress" not in held or task_id in s.progress, (task_id, held, "progress not stored")
    for device_id, task_id in s.reservations.items():
        assert task_id in s.tasks and s.tasks[task_id]["device_id"] == device_id, (device_id, task_id)
    by_host: dict[str, set[str]] = {}
    for device_id, device in s.devices.items():
        by_host.setdefault(device["host_id"], set()).add(device_id)
    assert {h: d for h, d in s.host_devices.items() if d} == by_host, "host_devices mirror the pool"
    assert s.by_driver == {member(d["driver"], i) for i, d in s.devices.items()}, "devices_by_driver"
    # A host's last heartbeat is in hosts_online (the sweep's index) exactly while its state holds it
    # (what placement reads): both written by the heartbeat, both dropped when the host is detached.
    assert s.seen == s.online, "hosts_online mirrors each host_state's seen"
    check_targets(s)
    expected_index: dict[str, set[str]] = {}
    for device_id in s.free:
        device = s.devices.get(device_id)
        assert device is not None, device_id
        expected_index.setdefault(f"free_devices:{device['driver']}", set()).add(device_id)
        for name, value in orjson.loads(device.get("labels") or "{}").items():
            expected_index.setdefault(f"free_label:{label_index(device['driver'], name, value)}", set()).add(device_id)
    assert {k: v for k, v in s.free_index.items() if v} == expected_index, "the free index is the free devices'"
    pooled: dict[str, set[str]] = {}
    for device_id, device in s.devices.items():
        for name, value in orjson.loads(device.get("labels") or "{}").items():
            pooled.setdefault(f"pooled_label:{label_index(device['driver'], name, value)}", set()).add(device_id)
    assert {k: v for k, v in s.pooled_index.items() if v} == pooled, "the label index is the pool's"
    for device_id in s.free:
        device = s.devices[device_id]
        host = device["host_id"]
        # The sweep's record of online (hosts_online), not the deadline: a host past its deadline
        # keeps its devices in the free index until the sweep, and placement skips them meanwhile.
        assert (device["status"] == "available" and device_id not in s.reservations and device_id not in s.disabled
                and host in s.online and host not in s.draining and host not in s.stalled), (device_id, device)


def check_targets(s: Stored) -> None:
    """A target is interned exactly while a team waits for it, indexed once where a freed device
    looks for it; its teams and the teams' targets are scored by each queue's first task."""
    queues: dict[str, dict[str, float]] = {}  # target id -> team -> its first score
    for key, queued in s.waiting.items():
        if queued:
            target_id, _, team = key.removeprefix("waiting:").rpartition("|")
            queues.setdefault(target_id, {})[team] = min(queued.values())
    assert set(s.targets) == set(queues), ("targets interned", set(s.targets), set(queues))
    assert {t: heads for t, heads in s.target_teams.items() if heads} == queues, "target_teams"
    by_team: dict[str, dict[str, float]] = {}
    for target_id, heads in queues.items():
        for team, head in heads.items():
            by_team.setdefault(team, {})[target_id] = head
    assert {team: t for team, t in s.team_targets.items() if t} == by_team, "team_targets"
    assert set(s.target_ids.values()) == set(s.targets) and len(s.target_ids) == len(s.targets), "target_ids"
    indexed: dict[str, set[str]] = {}
    for target_id, target in s.targets.items():
        indexed.setdefault(target_index(target), set()).add(target_id)
    assert {k: v for k, v in s.target_indexes.items() if v} == indexed, "each target indexed once"
    for task_id, task in s.tasks.items():
        if task["status"] == "queued":
            target = s.targets[task["target_id"]]
            assert {k: v for k, v in target.items() if k not in ("spec", "indexed") and v is not None} == \
                {k: v for k, v in target_of(task).items() if v is not None}, (task_id, target)


def team_of(task: dict[str, Any]) -> str:
    return task.get("team") or "default"


def team_settings(s: Stored, team: str) -> tuple[int, int | None]:
    """A team's weight and cap, as stored (absent: weight 1, no cap)."""
    settings = orjson.loads(s.teams.get(team, "{}"))
    return int(settings.get("weight") or 1), settings.get("max_devices")


def team_running(s: Stored, team: str) -> int:
    """The devices the team's tasks hold, counted from the tasks (not from the stored count)."""
    return sum(1 for t in s.tasks.values() if t["status"] in ("assigned", "running") and team_of(t) == team)


def at_quota(s: Stored, team: str) -> bool:
    cap = team_settings(s, team)[1]
    return cap is not None and team_running(s, team) >= cap


def check_team_counts(s: Stored) -> None:
    """Each team's stored counts are what its tasks say: devices held, tasks queued."""
    teams = {team_of(t) for t in s.tasks.values()} | {f.partition("|")[0] for f in s.teams}
    for team in teams:
        queued = sum(1 for t in s.tasks.values() if t["status"] == "queued" and team_of(t) == team)
        assert int(s.teams.get(f"{team}|running", 0)) == team_running(s, team), (team, "running")
        assert int(s.teams.get(f"{team}|queued", 0)) == queued, (team, "queued")


def check_nothing_stranded(s: Stored, offline_after_ms: int) -> None:
    """No queued task waits beside a device it could run on, its team's quota aside, and but for
    the work a step left past its bounds for the reaper (lua/placeLeftOver): a team in
    `placing_teams`, a device in `refresh_devices` (not free meanwhile)."""
    for task_id, task in s.tasks.items():
        if task["status"] != "queued" or at_quota(s, team_of(task)) or team_of(task) in s.placing_teams:
            continue
        beside = [d for d in s.devices if fits(task, d, s.devices[d]) and could_run_now(s, d, offline_after_ms)
                  and host_runs(s, s.devices[d]["host_id"], task) and d not in s.refresh_devices]
        assert not beside, f"queued task {task_id} waits beside {beside} it could run on"


def device_busy(s: Stored, task: dict[str, Any], device_id: str, offline_after_ms: int) -> bool:
    """A device the task could run on but for the work it holds, which ends ("they will come
    free"): reserved or reported busy, and otherwise enabled, on an online host that is not draining
    and may run the task."""
    device = s.devices[device_id]
    host = device["host_id"]
    return ((device_id in s.reservations or device["status"] == "busy") and device_id not in s.disabled
            and host_online(s, host, offline_after_ms) and host not in s.draining and host_runs(s, host, task))


def expected_waiting_reason(s: Stored, task: dict[str, Any], offline_after_ms: int) -> str:
    """PROTOCOL.md, "Waiting work", from what is stored."""
    matching = [d for d in s.devices if fits(task, d, s.devices[d])]
    if not matching:
        return "no_matching_device"
    online_hosts = {s.devices[d]["host_id"] for d in matching
                    if host_online(s, s.devices[d]["host_id"], offline_after_ms)}
    if online_hosts and not any(host_runs(s, h, task) for h in online_hosts):
        return "no_capable_host"
    beside = [d for d in matching if could_run_now(s, d, offline_after_ms) and host_runs(s, s.devices[d]["host_id"], task)]
    if beside:
        if at_quota(s, team_of(task)):
            return "team_at_quota"
        # else only while the reaper has the team's placement or the device's feed to finish
        assert team_of(task) in s.placing_teams or set(beside) <= s.refresh_devices, \
            "only a team at its quota waits beside a free device"
    if any(device_busy(s, task, d, offline_after_ms) for d in matching):
        return "matching_devices_busy"
    return "no_schedulable_device"


def check_waiting_explained(s: Stored, offline_after_ms: int, candidates: dict[str, dict[str, Any]],
                            reasons: dict[str, str]) -> None:
    """Each queued task's ``candidates`` and ``waiting_reason``, as the reads answer them, agree
    with the oracle: ``matching`` counts the devices its target names, each of them under exactly
    one reason (none could run it now: ``check_nothing_stranded``), ``busy`` those that will come
    free, and the reason is PROTOCOL's."""
    for task_id, counts in candidates.items():
        task = s.tasks[task_id]
        assert task["status"] == "queued", (task_id, task["status"])
        matching = [d for d in s.devices if fits(task, d, s.devices[d])]
        free = [d for d in matching if could_run_now(s, d, offline_after_ms)
                and host_runs(s, s.devices[d]["host_id"], task)]
        reasons_counted = sum(n for name, n in counts.items() if name not in ("matching", "truncated", "team_at_quota"))
        assert counts["matching"] == len(matching), (task_id, counts, matching)
        assert counts["team_at_quota"] == at_quota(s, team_of(task)), (task_id, counts, "read, not inferred")
        assert reasons_counted == len(matching) - len(free), (task_id, counts, free)
        assert counts["busy"] == sum(device_busy(s, task, d, offline_after_ms) for d in matching), (task_id, counts)
        expected = expected_waiting_reason(s, task, offline_after_ms)
        assert reasons[task_id] == expected, (task_id, reasons[task_id], expected, counts)


def check_devices_read(s: Stored, offline_after_ms: int, states: list[DeviceState]) -> None:
    """The pool as the reads answer it (``Queries.devices``): every pooled device, with its
    reservation, its disabling and its host's standing as stored."""
    assert sorted(d.device.device_id for d in states) == sorted(s.devices)
    for state in states:
        device_id, host = state.device.device_id, state.device.host_id
        assert host == s.devices[device_id]["host_id"], device_id
        assert state.reserved_by == s.reservations.get(device_id), device_id
        assert (state.disabled is not None) == (device_id in s.disabled), device_id
        assert (state.host_online, state.host_draining, state.host_stalled) == (
            host_online(s, host, offline_after_ms), host in s.draining, host in s.stalled), (device_id, state)


def check_assignments_runnable(s: Stored) -> None:
    """An assignment waiting for its host's claim is one that host may run (its capabilities
    list the workflow, or list nothing)."""
    for task_id, task in s.tasks.items():
        if task["status"] == "assigned":
            assert host_runs(s, task["host_id"], task), f"{task_id} is assigned to a host that does not list it"


def placed_now(task: dict[str, Any], was: dict[str, Any] | None) -> bool:
    """Whether the step placed the task on a device: it is assigned now and was not; or it went
    from queued to running in the one step, dispatched by a result's eager dispatch (PROTOCOL.md,
    results), which obeys every rule an assignment does."""
    if task["status"] == "assigned":
        return was is None or was["status"] != "assigned"
    return task["status"] == "running" and was is not None and was["status"] == "queued"


def check_order(s: Stored, before: Stored | None) -> None:
    """PROTOCOL.md's order rules, for each task placed in this step (assigned, or eagerly
    dispatched), against every task still queued after it that could have taken its device,
    whatever its target (its device or a selector it matches now, on a host that runs it): none
    of higher priority, unless its team is at its quota (priority never inverted); none of its
    own team and priority that is older (FIFO within a team). An eagerly dispatched task, as an
    assignment, is one its host may run."""
    if before is None:
        return
    for task_id, task in s.tasks.items():
        was = before.tasks.get(task_id)
        if not placed_now(task, was):
            continue
        if task["status"] == "running":
            assert host_runs(s, task["host_id"], task), f"{task_id} was dispatched to a host that does not list it"
        device_id = task["device_id"]
        device = s.devices.get(device_id)
        if device is None:
            continue
        rivals = [(other_id, other) for other_id, other in s.tasks.items()
                  if other["status"] == "queued" and fits(other, device_id, device)
                  and host_runs(s, task["host_id"], other)]
        priority = task.get("priority", 0)
        # (a rival's quota excuses it, unless the task placed is its own team's: then the quota
        # went to the lower priority)
        higher = [i for i, other in rivals if other.get("priority", 0) > priority
                  and (team_of(other) == team_of(task) or not at_quota(s, team_of(other)))]
        assert not higher, f"{task_id} took {device_id} while tasks of higher priority that could run on it wait: {higher}"
        older = [i for i, other in rivals if team_of(other) == team_of(task) and other.get("priority", 0) == priority
                 and other["seq"] < task["seq"]]
        assert not older, f"{task_id} took {device_id} while older tasks of its team and priority wait: {older}"


def check_idle_longest(s: Stored, before: Stored | None, offline_after_ms: int) -> None:
    """PROTOCOL.md, "Sharing the fleet": a new task takes, of the free devices it may run on, the
    one idle longest (least recently released), so wear spreads across a rack: no device it could
    have taken (free and able to run it before the step, unchanged by it, and still free after)
    was free since earlier than the one it took."""
    if before is None:
        return

    def unchanged_and_ready(d: str) -> bool:
        was = before.devices.get(d)
        return (was is not None and d in before.free and could_run_now(before, d, offline_after_ms)
                and {k: was.get(k) for k in ("host_id", "labels", "driver")}
                == {k: s.devices[d].get(k) for k in ("host_id", "labels", "driver")})

    for task_id, task in s.tasks.items():
        if task["status"] != "assigned" or task_id in before.tasks:
            continue
        taken = task["device_id"]
        if not unchanged_and_ready(taken):
            continue
        # a rival able to run it at the readings before and after the step, so at the create between
        # them too (a host only goes offline as time passes)
        older = [d for d in s.free if unchanged_and_ready(d) and could_run_now(s, d, offline_after_ms)
                 and before.free_since[d] < before.free_since[taken]
                 and fits(task, d, s.devices[d]) and host_runs(s, s.devices[d]["host_id"], task)]
        assert not older, f"{task_id} took {taken} while {older} were idle longer"


def check_fair_share(s: Stored, before: Stored | None) -> None:
    """When a step assigned one queued task, to a device that was not free before it (a device
    freed in this step, so chosen among everything waiting for it): no other team with a task
    of that priority waiting for that device, not at its quota, held fewer devices for its
    weight than the chosen team did when the device was handed over (ties: the older task)."""
    if before is None:
        return
    newly = [(i, t) for i, t in s.tasks.items() if t["status"] in ("assigned", "running")
             and i in before.tasks and before.tasks[i]["status"] == "queued"]
    if len(newly) != 1:
        return
    _, task = newly[0]
    device_id = task["device_id"]
    if device_id in before.free:
        return
    team, priority = team_of(task), task.get("priority", 0)
    weight = team_settings(s, team)[0]
    mine = ((team_running(s, team) - 1) / weight, task["seq"])
    for other_id, other in s.tasks.items():
        rival = team_of(other)
        if (other["status"] != "queued" or rival == team or other.get("priority", 0) != priority
                or not fits(other, device_id, s.devices[device_id]) or at_quota(s, rival)
                or not host_runs(s, task["host_id"], other)):
            continue
        theirs = (team_running(s, rival) / team_settings(s, rival)[0], other["seq"])
        assert mine <= theirs, f"{device_id} went to {team} {mine} over {rival} {theirs} ({other_id})"


def check_accounted(s: Stored, before: Stored | None, created: dict[str, Any]) -> None:
    for task_id in created:
        if task_id in s.tasks:
            continue
        last = before.tasks.get(task_id) if before is not None else None
        if before is None or last is None:
            continue  # gone before the last reading: checked then
        assert last["status"] in TERMINAL, f"{task_id} vanished while {last['status']}"
        assert s.now_ms >= before.retention[task_id], f"{task_id} purged before its retention ended"
        # nothing of a purged task is left behind
        assert task_id not in s.by_status and task_id not in s.retention and task_id not in s.progress
        assert task_id not in s.idempotency.values(), task_id
        assert all(c.get("task_id") != task_id for c in s.claims.values()), task_id
        assert all(task_id not in q for q in s.waiting.values()) and task_id not in s.reservations.values()


def check_runs(s: Stored) -> None:
    """A run's kept state is what its tasks say (PROTOCOL.md, "Runs"): its counts are its current
    tasks' statuses (one per place, the latest rerun), by device and by work item too; it is
    `running` exactly while one of them has not ended, then succeeded, cancelled or failed by the
    rule; `stored` counts its task records, and a run whose last task was purged is gone whole."""
    for run_id, run in s.runs.items():
        counts = s.run_counts.get(run_id, {})
        mine = {task_id: t for task_id, t in s.tasks.items() if t.get("run_id") == run_id}
        assert mine and counts.get("stored") == len(mine), f"{run_id} stores {counts.get('stored')} of {len(mine)}"
        places = s.run_tasks.get(run_id, {})
        assert {t_id for t_id, t in mine.items() if "replaced_by" not in t} <= set(places), run_id
        assert sorted(places.values()) == sorted(set(places.values())), f"{run_id}: a place holds one task"
        current = [s.tasks[t_id] for t_id in places if t_id in s.tasks]
        if len(current) < run["places"]:
            continue  # retention took some already: the counts keep what they ended as
        statuses = Counter(t["status"] for t in current)
        for status in STATUS_CODES:
            assert counts.get(status, 0) == statuses.get(status, 0), (run_id, status, counts, statuses)
        for prefix in ("d\0", "w\0"):
            summed: Counter[str] = Counter()
            for name, n in counts.items():
                if name.startswith(prefix):
                    summed[name.rsplit("\0", 1)[1]] += n
            assert +summed == +statuses, (run_id, prefix, summed, statuses)
        open_tasks = sum(1 for t in current if t["status"] not in TERMINAL)
        assert counts.get("open", 0) == open_tasks, (run_id, counts.get("open"), open_tasks)
        if open_tasks:
            expected = "running"
        elif statuses["succeeded"] == len(current):
            expected = "succeeded"
        else:
            expected = "cancelled" if run.get("cancel_requested") else "failed"
        assert run["status"] == expected, (run_id, run["status"], expected)
    assert set(s.run_counts) <= set(s.runs) and set(s.run_tasks) <= set(s.runs), "a purged run left keys"


def check_stored(s: Stored, before: Stored | None, offline_after_ms: int, created: dict[str, Any]) -> None:
    check_indexes(s)
    check_runs(s)
    check_nothing_stranded(s, offline_after_ms)
    check_assignments_runnable(s)
    check_order(s, before)
    check_idle_longest(s, before, offline_after_ms)
    check_fair_share(s, before)
    check_team_counts(s)
    check_accounted(s, before, created)
    running_devices = [t["device_id"] for t in s.tasks.values() if t["status"] in ("assigned", "running")]
    assert len(running_devices) == len(set(running_devices)), "a device holds at most one task"
