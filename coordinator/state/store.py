"""The Redis store: one method per atomic operation, each one Lua script of lua/.

Python never reads protocol state, changes it and writes it back; every change is a script.
Reads live in ``state/reads/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

import wire
from coordinator.errors import ScriptError
from coordinator.state.access_scripts import AccessScripts
from coordinator.state.records import (
    ADMIN_ACTOR,
    Actor,
    HostPrincipal,
    RunCounts,
    RunRecord,
    TaskRecord,
    TeamShare,
)
from coordinator.state.script_calls import text
from coordinator.state.scripts import NO_WAIT
from coordinator.state.session_scripts import SessionScripts
from coordinator.state.wait_reasons import candidates_from_reply


@dataclass(frozen=True)
class Claimed:
    """A claim's answer: the assignment, and how long the attempt waited from queued to
    claimed (None for the replay of an earlier claim)."""

    assignment: dict[str, Any]
    waited_ms: int | None


@dataclass(frozen=True)
class Created:
    """A create's answer: the task, whether this call created it (not an idempotent repeat),
    and, when it was queued now, its candidates as read in the same step."""

    task: TaskRecord
    created: bool
    candidates: dict[str, Any] | None


@dataclass(frozen=True)
class RunState:
    """A run and its counts, as a script that changed it answered them."""

    run: RunRecord
    counts: RunCounts


@dataclass(frozen=True)
class LeftOut:
    """A device a matrix's selector matched and its run left out (lua/createRun-1.lua): why (a
    name of ``wait_reasons.CANDIDATE_COUNTS``: host_offline, disabled, host_draining, unavailable,
    host_stalled, no_workflow), and for no_workflow the work item's workflow."""

    device_id: str
    reason: str
    work: str | None = None

    @classmethod
    def many(cls, raw: list[dict[str, Any]]) -> tuple[LeftOut, ...]:
        return tuple(cls(item["device_id"], item["reason"], item.get("work")) for item in raw)


@dataclass(frozen=True)
class RunCreated(RunState):
    """A run create's answer: ``created`` false for an idempotent repeat; a matrix's devices left
    out (the first ``wire.RUN_EXCLUDED_LISTED``) and how many were."""

    created: bool
    excluded: tuple[LeftOut, ...] = ()
    excluded_count: int = 0


@dataclass(frozen=True)
class RenewalEntry:
    """One lease of a batch renewal: as a single renewal names it, with its progress JSON ("" to
    leave the stored one)."""

    lease_id: str
    task_id: str
    attempt: int
    progress_json: str


@dataclass(frozen=True)
class Recorded:
    """A result's answer: when it was recorded (ms), whether this was a replay, and what the
    task became (``queued`` when a retryable failure requeued it); with eager dispatch asked
    (``next``), the next assignment it dispatched on the freed device, or ``None``."""

    recorded_at_ms: int
    replayed: bool
    task_status: str
    next: Claimed | None = None

@dataclass(frozen=True)
class ArtifactRecorded:
    """An artifact's description as recorded (JSON of lua/recordArtifact), and whether this call
    only replayed an earlier, identical upload."""

    description: dict[str, Any]
    replayed: bool
    # The blobs of a live session's oldest screens, dropped to make room: delete them from the store.
    freed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArtifactAdmitted:
    """What lua/admitArtifact lets an upload do: the name's earlier description (the bytes are
    then only hashed: a replay or a conflict, never stored), or else how many bytes the task may
    still hold."""

    earlier: dict[str, Any] | None
    room: int


@dataclass(frozen=True)
class Purge:
    """What one retention call did: due tasks taken, tasks deleted, and the blob keys their
    artifacts left that no description names any more (for the caller to delete)."""

    taken: int
    acted: int
    blobs: list[str]

@dataclass(frozen=True)
class Sweep:
    """What one reaper call did: deadlines it took, and how many of them moved a task."""

    taken: int
    acted: int


class Store(SessionScripts, AccessScripts):
    """One method per Lua script; by concern, access (``access_scripts.py``) and live sessions
    (``session_scripts.py``) on what every part shares (``script_calls.py``)."""

    # -- hosts' protocol -------------------------------------------------------------------

    async def heartbeat(self, host: HostPrincipal, snapshot_json: str, capabilities_json: str = "") -> bool:
        """Whether the host is draining. ``capabilities_json``: the snapshot's
        ``agent.capabilities``, canonical, or "" when the agent sent none (it runs anything)."""
        reply = await self._run("heartbeat", [host.host_id, host.kind, snapshot_json, host.digest,
                                                   capabilities_json])
        return bool(reply[1] == 1)

    async def claim(self, host: HostPrincipal, claim_id: str, lease_id: str, ttl_ms: int,
                    process_id: str = "", wait_ms: int = 0) -> Claimed | None:
        """Claim the host's oldest assignment. Finding none, a poll that will wait ``wait_ms``
        is registered as waiting on ``process_id``, whose inbox an assignment then wakes."""
        reply = await self._run(
            "claimAssignment", [host.host_id, claim_id, lease_id, ttl_ms, host.digest, process_id, wait_ms])
        if not reply[1]:
            return None
        waited = int(reply[2])
        return Claimed(orjson.loads(reply[1]), waited if waited >= 0 else None)

    async def renew(self, host: HostPrincipal, lease_id: str, task_id: str, attempt: int, ttl_ms: int,
                    progress_json: str) -> tuple[int, bool]:
        reply = await self._on_lease("renewLease", host, lease_id, task_id, attempt, [ttl_ms, progress_json])
        return int(reply[1]), reply[2] == 1

    async def renew_many(self, host: HostPrincipal, ttl_ms: int,
                         leases: list[RenewalEntry]) -> list[tuple[int, bool] | ScriptError]:
        """Renew several of a host's leases in one step, each judged as ``renew`` judges one: per
        lease, in the order given, (new expiry in ms, cancel requested) or the refusal's code. A
        revoked credential raises, as ``renew`` does, and renews nothing."""
        args: list[Any] = [host.host_id, host.digest, ttl_ms]
        for entry in leases:
            args += [entry.lease_id, entry.task_id, entry.attempt, entry.progress_json]
        reply = await self._run("renewLeases", args)
        return [(int(answer[1]), answer[2] == 1) if answer[0] == 0 else ScriptError(answer[0])
                for answer in reply[1]]

    async def record_result(self, host: HostPrincipal, task_id: str, attempt: int, lease_id: str,
                            result_json: str, *, next_lease_id: str = "", ttl_ms: int = 0) -> Recorded:
        """Record a result. Given ``next_lease_id`` (eager dispatch, PROTOCOL.md results: the
        result's ``next``), the device it frees is dispatched the task the order gives it, in
        the same step, under that lease for ``ttl_ms``: ``Recorded.next``."""
        eager = next_lease_id != ""
        reply = await self._run("recordResult", [host.host_id, task_id, attempt, lease_id, result_json,
                                                      host.digest, 1 if eager else 0, next_lease_id, ttl_ms])
        dispatched = None
        if eager and reply[4]:
            waited = int(reply[5])
            dispatched = Claimed(orjson.loads(reply[4]), waited if waited >= 0 else None)
        return Recorded(int(reply[1]), reply[2] == 1, text(reply[3]), dispatched)

    # -- operators -------------------------------------------------------------------------

    # ``actor``: the operator whose request this is, named on every event the call writes.

    async def create_task(self, task: dict[str, Any], *, actor: Actor = ADMIN_ACTOR) -> Created:
        reply = await self._run("createTask", [orjson.dumps(task), self._candidates_scanned, actor.name, actor.id])
        stored = TaskRecord.from_json(reply[1])
        candidates = candidates_from_reply(reply[3]) if len(reply) > 3 else None
        return Created(stored, reply[2] == 1, candidates)

    async def cancel_task(self, task_id: str, *, actor: Actor = ADMIN_ACTOR, owner: str | None = None) -> TaskRecord:
        """``owner``: cancel only if this operator token created the task (else ``InsufficientScope``)."""
        reply = await self._run("cancelTask", [task_id, owner or "", actor.name, actor.id])
        return TaskRecord.from_json(reply[1])

    # -- runs (lua/includes/runs.lua) ---------------------------------------------------------

    async def create_run(self, run: dict[str, Any], tasks: list[dict[str, Any]], matrix: dict[str, Any] | None,
                         max_tasks: int, *, actor: Actor = ADMIN_ACTOR) -> RunCreated:
        """A run and all its tasks in one step (lua/createRun): ``tasks`` their specs, or a
        ``matrix`` ({work, driver, labels}) the script expands over the devices that could run
        it now (``NoMatchingDevice`` when none could, with those it left out)."""
        reply = await self._run("createRun", [orjson.dumps(run), orjson.dumps(tasks),
                                                   "" if matrix is None else orjson.dumps(matrix), max_tasks,
                                                   actor.name, actor.id, wire.RUN_EXCLUDED_LISTED])
        stored = orjson.loads(reply[1])
        return RunCreated(RunRecord.from_json(reply[1]), RunCounts.from_hash(reply[3]), reply[2] == 1,
                          LeftOut.many(stored.get("excluded") or []), int(stored.get("excluded_count") or 0))

    async def cancel_run(self, run_id: str, *, actor: Actor = ADMIN_ACTOR, owner: str | None = None) -> RunState:
        """``owner``: cancel only if this operator token created the run (else ``InsufficientScope``)."""
        reply = await self._run("cancelRun", [run_id, owner or "", actor.name, actor.id])
        return RunState(RunRecord.from_json(reply[1]), RunCounts.from_hash(reply[2]))

    async def rerun_failed(self, run_id: str, *, actor: Actor = ADMIN_ACTOR,
                           owner: str | None = None) -> tuple[int, RunState]:
        """How many failed tasks got a rerun, and the run after it."""
        reply = await self._run("rerunFailed", [run_id, owner or "", actor.name, actor.id])
        return int(reply[1]), RunState(RunRecord.from_json(reply[2]), RunCounts.from_hash(reply[3]))

    async def set_team(self, team: str, change: dict[str, Any]) -> TeamShare:
        """Set a team's ``weight`` and/or ``max_devices`` (None: no cap); its share after it."""
        reply = await self._run("setTeam", [team, orjson.dumps(change)])
        settings = orjson.loads(reply[1])
        return TeamShare(team, settings["weight"], settings["max_devices"], int(reply[2]), int(reply[3]))

    async def set_host_draining(self, host_id: str, draining: bool, *, actor: Actor = ADMIN_ACTOR) -> bool:
        """Whether anything changed."""
        reply = await self._run("setHostDraining", [host_id, 1 if draining else 0, actor.name, actor.id])
        return bool(reply[1] == 1)

    async def set_device_disabled(self, device_id: str, disabled: bool, reason: str = "", *,
                                  actor: Actor = ADMIN_ACTOR) -> bool:
        """Whether anything changed (disabling again still updates the reason)."""
        reply = await self._run("setDeviceDisabled",
                                     [device_id, 1 if disabled else 0, reason, actor.name, actor.id])
        return bool(reply[1] == 1)

    async def forget_device(self, device_id: str, *, actor: Actor = ADMIN_ACTOR) -> None:
        await self._run("forgetDevice", [device_id, actor.name, actor.id])

    async def revoke_host(self, host_id: str, static_digest: str | None, *, actor: Actor = ADMIN_ACTOR) -> None:
        """Revoke an enrolled host's credential, or the configured one (``static_digest``)."""
        await self._run("revokeHost", [host_id, static_digest or "", actor.name, actor.id])

    # -- the reaper's sweeps ---------------------------------------------------------------

    async def expire_leases(self, limit: int = 100) -> int:
        reply = await self._run("expireLeases", [limit])
        return int(reply[1])

    async def expire_hosts(self, limit: int = 100) -> int:
        reply = await self._run("expireHosts", [limit])
        return int(reply[1])

    async def expire_assignments(self, limit: int = 100) -> Sweep:
        """Claim timeouts: (deadlines taken, assignments sent back to the queue)."""
        reply = await self._run("expireAssignments", [limit])
        return Sweep(int(reply[1]), int(reply[2]))

    async def expire_queued(self, limit: int = 100) -> Sweep:
        """Queue timeouts: (deadlines taken, tasks failed)."""
        reply = await self._run("expireQueued", [limit])
        return Sweep(int(reply[1]), int(reply[2]))

    async def place_left_over(self, limit: int = 100) -> int:
        """What steps left past their bounds, placed on (lua/placeLeftOver): devices not fed yet,
        then teams whose placement stopped at a slice; a slice a call, at most ``limit`` calls;
        how many slices ran."""
        served = 0
        while served < limit:
            reply = await self._run("placeLeftOver", [])
            if int(reply[1]) == 0:
                break
            served += 1
        return served

    async def purge_tasks(self, limit: int = 100, artifact_budget: int = 10_000) -> Purge:
        """Retention: terminal tasks deleted, and the blobs of theirs to delete now; a task of a run
        is kept until a retention after its run ended. A call stops taking tasks once it deleted
        ``artifact_budget`` artifact descriptions."""
        reply = await self._run("purgeTasks", [limit, artifact_budget])
        return Purge(taken=int(reply[2]), acted=int(reply[1]), blobs=[text(b) for b in reply[3:]])

    # -- artifacts -------------------------------------------------------------------------

    async def admit_artifact(self, host: HostPrincipal, lease_id: str, task_id: str, attempt: int,
                             name: str, *, declared: int | None, max_task_bytes: int,
                             max_task_artifacts: int) -> ArtifactAdmitted:
        """Whether an upload may store any byte, before its body is read (lua/admitArtifact): the
        renewal's refusal (409, or 401 for a revoked credential) if the lease is not the task's
        current one, ``artifact_limit`` when the task is at a cap or ``declared`` passes it;
        nothing changes either way."""
        reply = await self._on_lease(
            "admitArtifact", host, lease_id, task_id, attempt,
            [name, "" if declared is None else declared, max_task_bytes, max_task_artifacts],
        )
        earlier = orjson.loads(reply[1]) if reply[1] else None
        return ArtifactAdmitted(earlier, int(reply[2]))

    async def record_artifact(self, host: HostPrincipal, lease_id: str, task_id: str, attempt: int,
                              name: str, *, size: int, sha256: str, content_type: str,
                              step_index: int | None, blob: str, max_task_bytes: int,
                              max_task_artifacts: int) -> ArtifactRecorded:
        """Describe an artifact whose bytes are stored as ``blob`` (lua/recordArtifact)."""
        reply = await self._on_lease(
            "recordArtifact", host, lease_id, task_id, attempt,
            [name, size, sha256, content_type, "" if step_index is None else step_index, blob, max_task_bytes,
             max_task_artifacts],
        )
        return ArtifactRecorded(orjson.loads(reply[1]), reply[2] == 1, tuple(text(b) for b in reply[3:]))

    async def upgrade_host_state(self, limit: int = 100) -> int:
        """Entries of the earlier layout of hosts' standing moved into ``host_state:<host>``
        (lua/upgradeHostState, which alone names that layout's keys)."""
        reply = await self._run("upgradeHostState", [limit])
        return int(reply[1])

    async def upgrade_device_runs(self, limit: int = 100) -> Sweep:
        """Pooled devices whose runs lost the expiry earlier versions gave them
        (lua/upgradeDeviceRuns): a batch while the walk is under way (a full one, so the caller
        calls again), what is left once it is done."""
        # Never waits for replicas: it runs as a process starts, and a walk a failover loses is
        # walked again by the next start, with the same result.
        reply = await self._run("upgradeDeviceRuns", [limit], NO_WAIT)
        walked = int(reply[1])
        return Sweep(walked if reply[2] == 1 else limit, walked)

    async def upgrade_placement(self, limit: int = 100) -> Sweep:
        """Queued tasks and free devices of the earlier placement layout moved to queues by target
        and the free index (lua/upgradePlacement): a full batch while under way, then what is left."""
        # Never waits for replicas, as upgrade_device_runs.
        reply = await self._run("upgradePlacement", [limit], NO_WAIT)
        moved = int(reply[1])
        return Sweep(moved if reply[2] == 1 else limit, moved)

    async def upgrade_team_names(self, limit: int = 100) -> Sweep:
        """Teams of an earlier version named in ``team_names`` and kept (lua/upgradeTeamNames): a
        batch while the walk is under way (a full one, so the caller calls again), what is left
        once it is done."""
        # Never waits for replicas, as upgrade_device_runs.
        reply = await self._run("upgradeTeamNames", [limit], NO_WAIT)
        walked = int(reply[1])
        return Sweep(walked if reply[2] == 1 else limit, walked)

    async def upgrade_idempotency_keys(self, limit: int = 100) -> Sweep:
        """Idempotency entries of an earlier version (the bare key) moved under their token
        (lua/upgradeIdempotencyKeys): a full batch while the walk is under way, then what is left."""
        # Never waits for replicas, as upgrade_device_runs.
        reply = await self._run("upgradeIdempotencyKeys", [limit], NO_WAIT)
        walked = int(reply[1])
        return Sweep(walked if reply[2] == 1 else limit, walked)

    async def upgrade_team_usage(self, limit: int = 100) -> Sweep:
        """Teams' device time of an earlier version (by minute % 60) moved to fields by the minute
        (lua/upgradeTeamUsage): a full batch while the walk is under way, then what is left."""
        # Never waits for replicas, as upgrade_device_runs.
        reply = await self._run("upgradeTeamUsage", [limit], NO_WAIT)
        walked = int(reply[1])
        return Sweep(walked if reply[2] == 1 else limit, walked)

    async def upgrade_status_index(self, limit: int = 100) -> int:
        """Entries of the earlier ``tasks_by_status`` layout converted (lua/upgradeStatusIndex)."""
        reply = await self._run("upgradeStatusIndex", [limit])
        return int(reply[1])


    async def end_idle_sessions(self, limit: int = 100) -> Sweep:
        """Idle timeouts and max durations: (deadlines taken, sessions asked to end)."""
        reply = await self._run("endIdleSessions", [limit])
        return Sweep(int(reply[1]), int(reply[2]))
