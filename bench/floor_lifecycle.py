"""The lifecycle floor: the fewest Redis commands a lifecycle of the contract can take, run for real.

Four scripts, one per call (create, claim, renew, result), each changing only the state the
contract (PROTOCOL.md) asks of that call, one command per structure it touches, with every merge
of structures we could find. The obligations, and the command each costs:

- every call: the script itself (EVALSHA) and the Redis clock (TIME), which leases and deadlines
  are read against so every coordinator process agrees;
- create: the task's age (INCR: listings are newest first, queues oldest first); taking its free
  device (ZREM from the free index answers whether it was free, in the same command); the
  device's `reserved_by` (HSET); the host's queue (RPUSH); the claim deadline (ZADD: an
  unclaimed assignment goes back); the feed (one XADD for `created` and `assigned` together); the
  waiting poll's wake-up (one read of the host's poll registrations; when a poll waits, a push
  onto its process's inbox and the registration's removal); the status listing (ZADD); the
  record, which carries the history (HSET);
- claim: revocation (SISMEMBER: a revoked credential is refused atomically); the host's queue
  (LPOP); the record (HGET, HSET); the one deadline per task, now the lease's (ZADD); the feed
  (XADD); the status listing (ZADD); finding nothing, a poll that will wait registers its
  process's inbox (ZADD), in the same step, so no assignment made after it goes unnoticed;
- renew: the record, which also holds the lease deadline and the latest progress (HGET, HSET);
  revocation (SISMEMBER); the deadline index (ZADD);
- result: the record (HGET, HSET); revocation (SISMEMBER); the status listing (ZADD); the
  deadline, now retention's (ZADD); the feed (XADD); the device's history (LPUSH: its bound
  and its expiry cost nothing a run, includes/events.lua); the reservation (HDEL); the device's
  waiting work (one ZRANGE); the free index (ZADD).

Drawn before sharing the fleet, webhooks and lease keys, the floor was 39 commands (38 since a
device's history needs no expiry a run). What each of those asks of every lifecycle since
(PROTOCOL.md, "Sharing the fleet" and "Webhooks"; DESIGN.md, "Keys are for people"), at one
command per need:

- create: the team's cap and the devices it holds (HMGET: a team at its quota waits), then one
  more held (HINCRBY);
- claim: the lease's key, with its TTL (SET);
- renew: the key's TTL extended with the deadline (SET);
- result: the key deleted (DEL); one fewer held (HINCRBY), and the team's cap (HGET: a release
  that takes it below its cap places its waiting work); its device time this hour, which the
  teams listing shows (HINCRBY); whether a webhook wants `task.ended` (HGET).

So the floor is 47. Two more calls serve the peers harness's floor column (bench/peers/tether.py),
and no lifecycle above: a create for any device takes a free one (ZPOPMIN) or, with none, waits
on the fleet's queue (RPUSH) under its queue deadline (ZADD); a result asking `next` (eager
dispatch) does the result's work, then takes the device's next task (its own waiting work, else
the fleet's queue: ZPOPMIN, LPOP) and does the claim's work on it in the same script, the
reservation and the team's count moving with it (HSET, HINCRBY).

What it leaves out, Tether does: host liveness, drain and stall checks,
disabled devices, the idempotency of claim ids, selectors with labels, progress on the feed,
the share among teams waiting for a freed device. So it is a floor: we know of no way to keep
the contract's state in fewer commands, and Tether's extra work is the gap to it.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

from coordinator.api.bodies import TaskCreate
from coordinator.api.tasks import parse_task
from coordinator.state.keys import Keys
from coordinator.state.records import HostPrincipal
from coordinator.state.store import Store
from coordinator.transport.autopipeline import AutoPipeline
from coordinator.transport.base import AutoPipelinedTransport

CLOCK = """
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# A task's lease, what the claim does to it and, with eager dispatch, a result to the freed
# device's next task: the record (status, lease, history), the task's one deadline (now the
# lease's), the lease key, one feed entry (``feed``: events before the claim's own, in the same
# entry), the status listing. K names the keys: tasks deadlines feed by_status, and the lease
# key's prefix. Returns the assignment as a claim answers it.
LEASE = """
local function lease(K, task, leaseId, ttl, host, now, feed)
  task.status, task.lease_id, task.started_at, task.updated_at = 'running', leaseId, now, now
  task.lease_deadline = now + ttl
  task.leases = task.leases or {}
  task.leases[#task.leases + 1] = {id = leaseId, host_id = host, attempt = task.attempt}
  local event = {at = now, type = 'claimed', status = 'running', attempt = task.attempt,
                 device_id = task.device_id, host_id = task.host_id}
  task.events[#task.events + 1] = event
  redis.call('ZADD', K.deadlines, now + ttl, task.id)
  redis.call('SET', K.lease .. task.id, cjson.encode({lease_id = leaseId, host_id = host, attempt = task.attempt}),
             'PX', ttl)
  event.task_id = task.id
  feed[#feed + 1] = event
  redis.call('XADD', K.feed, 'MAXLEN', '~', 10000, '*', 'e', cjson.encode(#feed == 1 and event or feed))
  redis.call('ZADD', K.by_status, string.format('%.0f', 3 * 2^48 + task.seq), task.id)
  redis.call('HSET', K.tasks, task.id, cjson.encode(task))
  return {task_id = task.id, attempt = task.attempt, lease_id = leaseId, lease_ttl_ms = ttl,
          lease_expires_at_ms = now + ttl, device_id = task.device_id, kind = task.kind,
          goal = task.goal, max_steps = task.max_steps}
end
"""

# KEYS: tasks seq by_status free reservations deadlines feed teams queue (the fleet's: work for
#       any device)
# ARGV: task JSON, device id ('' for any device), claim timeout (ms), team, the key prefix (a
#       host's queue and polls and a device's waiting work are named from it and the device)
# A device is named after its host (``<host>-<n>``), so the script finds a free device's host.
CREATE = CLOCK + """
local now = nowMs()
local task = cjson.decode(ARGV[1])
task.seq = redis.call('INCR', KEYS[2])
task.attempt, task.created_at, task.updated_at, task.queued_at = 1, now, now, now
local events = {{at = now, type = 'created', status = 'queued', attempt = 1, device_id = ARGV[2]}}
local team = redis.call('HMGET', KEYS[8], ARGV[4], ARGV[4] .. '|running')
local cap = team[1] and cjson.decode(team[1]).max_devices
if cap and tonumber(team[2] or 0) >= cap then
  return redis.error_reply('the floor runs only below the team cap')
end
local device = ARGV[2]
if device == '' then
  device = redis.call('ZPOPMIN', KEYS[4])[1]
elseif redis.call('ZREM', KEYS[4], device) == 0 then
  device = nil
end
local rank = 1
if device then
  local host = device:match('^(.*)%-')
  redis.call('HSET', KEYS[5], device, task.id)
  redis.call('HINCRBY', KEYS[8], ARGV[4] .. '|running', 1)
  redis.call('RPUSH', ARGV[5] .. 'assigned:' .. host, task.id)
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[3]), task.id)
  task.status, task.device_id, task.host_id, rank = 'assigned', device, host, 2
  events[2] = {at = now, type = 'assigned', status = 'assigned', attempt = 1, device_id = device, host_id = host}
  local polls = ARGV[5] .. 'polls:' .. host
  local inboxes = redis.call('ZRANGEBYSCORE', polls, now, '+inf')
  if #inboxes > 0 then
    for _, inbox in ipairs(inboxes) do
      redis.call('RPUSH', inbox, host)
    end
    redis.call('DEL', polls)
  end
else
  -- no free device: the task waits on its device's queue, or the fleet's, until its queue deadline
  task.status = 'queued'
  if ARGV[2] == '' then
    redis.call('RPUSH', KEYS[9], task.id)
  else
    redis.call('ZADD', ARGV[5] .. 'waiting:' .. ARGV[2], task.seq, task.id)
  end
  redis.call('ZADD', KEYS[6], now + task.queue_timeout_ms, task.id)
end
task.events = events
redis.call('XADD', KEYS[7], 'MAXLEN', '~', 10000, '*', 'e', cjson.encode(events))
redis.call('ZADD', KEYS[3], string.format('%.0f', rank * 2^48 + task.seq), task.id)
local encoded = cjson.encode(task)
redis.call('HSET', KEYS[1], task.id, encoded)
return encoded
"""

# KEYS: revoked assigned tasks deadlines feed by_status polls; the lease key's prefix is ARGV[7]
# ARGV: credential digest, lease id, lease TTL (ms), host id, the waiting poll's inbox ("" if it
# will not wait), how long it waits (ms), the lease key's prefix
CLAIM = CLOCK + LEASE + """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return redis.error_reply('revoked')
end
local now = nowMs()
local taskId = redis.call('LPOP', KEYS[2])
if not taskId then
  if ARGV[5] ~= '' then
    redis.call('ZADD', KEYS[7], now + tonumber(ARGV[6]), ARGV[5])
  end
  return false
end
local task = cjson.decode(redis.call('HGET', KEYS[3], taskId))
local K = {tasks = KEYS[3], deadlines = KEYS[4], feed = KEYS[5], by_status = KEYS[6], lease = ARGV[7]}
return cjson.encode(lease(K, task, ARGV[2], tonumber(ARGV[3]), ARGV[4], now, {}))
"""

# What renew and result share. KEYS[1] tasks, KEYS[2] revoked; ARGV[1..4] host id, lease id,
# task id, attempt. The running task whose current lease this is, and the time; or nil and the
# error to answer.
LEASED = CLOCK + """
local function leasedTask(digest)
  local raw = redis.call('HGET', KEYS[1], ARGV[3])
  if redis.call('SISMEMBER', KEYS[2], digest) == 1 then
    return nil, redis.error_reply('revoked')
  end
  local now = nowMs()
  local task = raw and cjson.decode(raw)
  if not task or task.lease_id ~= ARGV[2] or task.host_id ~= ARGV[1] or task.attempt ~= tonumber(ARGV[4])
      or task.status ~= 'running' then
    return nil, redis.error_reply('not the current lease')
  end
  return task, now
end
"""

# KEYS: tasks revoked deadlines lease
# ARGV: host id, lease id, task id, attempt, lease TTL (ms), progress JSON, credential digest
RENEW = LEASED + """
local task, now = leasedTask(ARGV[7])
if not task then
  return now
end
if task.lease_deadline <= now then
  return redis.error_reply('not the current lease')
end
task.lease_deadline = now + tonumber(ARGV[5])
task.progress = cjson.decode(ARGV[6])
redis.call('ZADD', KEYS[3], task.lease_deadline, ARGV[3])
redis.call('SET', KEYS[4], cjson.encode({lease_id = ARGV[2], host_id = ARGV[1], attempt = task.attempt}),
           'PX', tonumber(ARGV[5]))
redis.call('HSET', KEYS[1], ARGV[3], cjson.encode(task))
return task.lease_deadline
"""

# What a result records, whatever the device does next: the record's fields (saved by the
# caller), the status listing, retention's deadline, the feed, the device's history, the lease
# key, the webhook lookup, the team's count and cap, its device time. KEYS and ARGV[1..8] as
# RESULT's. Returns the report.
RECORD = LEASED + """
local function record(task, now)
  local report = cjson.decode(ARGV[5])
  task.status, task.finished_at, task.updated_at = report.status, now, now
  task.result = {recorded_at = now, attempt = task.attempt, task_status = report.status}
  task.result_report, task.failure_reason, task.progress = ARGV[5], report.failure_reason, nil
  local event = {at = now, type = 'result', status = report.status, attempt = task.attempt,
                 device_id = task.device_id, host_id = task.host_id}
  task.events[#task.events + 1] = event
  redis.call('ZADD', KEYS[3], string.format('%.0f', 4 * 2^48 + task.seq), ARGV[3])
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[7]), ARGV[3])
  event.task_id = ARGV[3]
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'e', cjson.encode(event))
  redis.call('LPUSH', KEYS[6], cjson.encode({task_id = ARGV[3], attempt = task.attempt, host_id = task.host_id,
                                             started_at = task.started_at, ended_at = now,
                                             outcome = report.status}))
  redis.call('DEL', KEYS[10])
  redis.call('HGET', KEYS[13], 'task.ended')  -- no webhook in the floor's runs: nothing to deliver
  redis.call('HINCRBY', KEYS[11], ARGV[8] .. '|running', -1)
  redis.call('HGET', KEYS[11], ARGV[8])  -- no cap in the floor's runs: no team work to place
  redis.call('HINCRBY', KEYS[12], math.floor(now / 60000), now - task.started_at)
  return report
end
"""

# KEYS: tasks revoked by_status deadlines feed device_runs reservations waiting free lease teams
#       team_usage webhook_routes
# ARGV: host id, lease id, task id, attempt, result JSON, credential digest, retention (ms), team
# Without `next`, the freed device only looks whether work waits for it: the floor's lifecycles
# queue none (RESULT_NEXT is the result that dispatches it).
RESULT = RECORD + """
local task, now = leasedTask(ARGV[6])
if not task then
  return now
end
record(task, now)
redis.call('HSET', KEYS[1], ARGV[3], cjson.encode(task))
redis.call('HDEL', KEYS[7], task.device_id)
if #redis.call('ZRANGE', KEYS[8], 0, 0) == 0 then
  redis.call('ZADD', KEYS[9], 0, task.device_id)
end
return now
"""

# A result with `next: true` (eager dispatch): RESULT's work, then the freed device's next task,
# its own waiting work first, else the fleet's queue, leased as a claim would and returned in the
# answer (and kept on the finished record, which a replay answers from); with none, it is free.
# KEYS: RESULT's, then queue (the fleet's)
# ARGV: RESULT's, then the next lease's id, its TTL (ms), the lease key's prefix
RESULT_NEXT = RECORD + LEASE + """
local task, now = leasedTask(ARGV[6])
if not task then
  return now
end
local report = record(task, now)
local answer = {task_id = ARGV[3], attempt = task.attempt, status = report.status, task_status = report.status,
                recorded_at_ms = now, replayed = false, next_assignment = cjson.null}
local nextId = redis.call('ZPOPMIN', KEYS[8])[1]
if not nextId then
  nextId = redis.call('LPOP', KEYS[14])
end
if nextId then
  local following = cjson.decode(redis.call('HGET', KEYS[1], nextId))
  redis.call('HSET', KEYS[7], task.device_id, nextId)
  redis.call('HINCRBY', KEYS[11], ARGV[8] .. '|running', 1)
  following.status, following.device_id, following.host_id = 'assigned', task.device_id, ARGV[1]
  local assigned = {at = now, type = 'assigned', status = 'assigned', attempt = following.attempt,
                    device_id = task.device_id, host_id = ARGV[1], task_id = nextId}
  following.events[#following.events + 1] = assigned
  local K = {tasks = KEYS[1], deadlines = KEYS[4], feed = KEYS[5], by_status = KEYS[3], lease = ARGV[11]}
  answer.next_assignment = lease(K, following, ARGV[9], tonumber(ARGV[10]), ARGV[1], now, {assigned})
  task.next_assignment = answer.next_assignment
else
  redis.call('HDEL', KEYS[7], task.device_id)
  redis.call('ZADD', KEYS[9], 0, task.device_id)
end
redis.call('HSET', KEYS[1], ARGV[3], cjson.encode(task))
return cjson.encode(answer)
"""

@dataclass(frozen=True)
class ScriptFigures:
    """Redis's side of one lifecycle driven straight at the scripts (bench/footprint.py)."""

    commands: float
    # Redis's time inside the scripts (FCALL or EVALSHA) per lifecycle, one at a time, as
    # commandstats counts it: the scripts' own, where the process's CPU counts everything
    script_us_alone: float
    cpu_ms_alone: float  # one lifecycle at a time, as row 8b
    cpu_ms_loaded: float  # many at once, batched, as under row 3's load and in saq's figure


@dataclass(frozen=True)
class LifecycleScripts:
    """The floor's scripts and Tether's, measured alike in one run."""

    floor: ScriptFigures
    tether: ScriptFigures


class Lifecycles:
    """Lifecycles on hosts of their own (host ``h<n>`` has device ``h<n>-d0``), ``concurrency``
    at once."""

    async def load(self, hosts: int) -> None:
        raise NotImplementedError

    async def lifecycle(self, n: int, body: dict[str, object]) -> None:
        raise NotImplementedError

    async def run(self, lifecycles: int, concurrency: int, body: dict[str, object]) -> None:
        async def worker(n: int) -> None:
            for _ in range(n, lifecycles, concurrency):
                await self.lifecycle(n, body)

        await asyncio.gather(*(worker(n) for n in range(concurrency)))


CLAIM_TIMEOUT_MS = 60_000
LEASE_TTL_MS = 60_000
RETENTION_MS = 7 * 86_400_000
TEAM = "default"


class LifecycleFloor(Lifecycles):
    """The four scripts on one key prefix, one method per call; ``lifecycle(n)`` runs all four on
    host n's device. Calls go through the coordinator's auto-pipelining, so Redis reads them
    batched as it reads a coordinator's under load. The floor app (bench/floor_app.py) serves the
    same four calls over HTTP, and ``result_next`` a result asking ``next`` (eager dispatch). A
    device is named after its host (``<host>-d0``, as bench fleets name them), so no call asks
    Redis whose it is."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._auto = AutoPipeline(redis)
        self._sha: dict[str, str] = {}
        self.digest = secrets.token_hex(32)

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    async def load_scripts(self) -> None:
        for name, source in (("create", CREATE), ("claim", CLAIM), ("renew", RENEW), ("result", RESULT),
                             ("result_next", RESULT_NEXT)):
            self._sha[name] = await self.redis.script_load(source)

    async def add_free(self, devices: list[str]) -> None:
        await self.redis.zadd(self._key("free"), dict.fromkeys(devices, 0))

    async def load(self, hosts: int) -> None:
        await self.load_scripts()
        await self.add_free([f"h{n}-d0" for n in range(hosts)])

    async def _call(self, script: str, keys: list[str], *args: object) -> Any:
        return await self._auto.execute("EVALSHA", self._sha[script], len(keys), *keys, *args)

    async def create(self, device: str, body: dict[str, object]) -> bytes:
        """A task for ``device``, or for any device when it is ""; queued when none is free."""
        k = self._key
        task = orjson.dumps({**body, "id": f"t_{secrets.token_hex(12)}", "max_steps": 20, "max_attempts": 3,
                             "queue_timeout_ms": 86_400_000, "target_device": device})
        return await self._call("create", [k("tasks"), k("seq"), k("by_status"), k("free"), k("reservations"),
                                           k("deadlines"), k("feed"), k("teams"), k("queue")],
                                task, device, CLAIM_TIMEOUT_MS, TEAM, k(""))

    async def claim(self, host: str, inbox: str = "", wait_ms: int = 0) -> bytes | None:
        """The assignment JSON, or None when the host has none; then, given an ``inbox`` (a list
        key), a create for the host pushes onto it during the next ``wait_ms``."""
        k = self._key
        return await self._call("claim", [k("revoked"), k(f"assigned:{host}"), k("tasks"), k("deadlines"), k("feed"),
                                          k("by_status"), k(f"polls:{host}")],
                                self.digest, f"l_{secrets.token_hex(16)}", LEASE_TTL_MS, host, inbox, wait_ms,
                                k("lease:"))

    def inbox(self, process: str) -> str:
        return self._key(f"inbox:{process}")

    async def renew(self, host: str, lease_id: str, task_id: str, attempt: int, progress: bytes) -> int:
        k = self._key
        return await self._call("renew", [k("tasks"), k("revoked"), k("deadlines"), k(f"lease:{task_id}")],
                                host, lease_id, task_id, attempt, LEASE_TTL_MS, progress, self.digest)

    def _result_keys(self, host: str, task_id: str) -> list[str]:
        k, device = self._key, f"{host}-d0"
        return [k("tasks"), k("revoked"), k("by_status"), k("deadlines"), k("feed"), k(f"device_runs:{device}"),
                k("reservations"), k(f"waiting:{device}"), k("free"), k(f"lease:{task_id}"), k("teams"),
                k(f"team_usage:{TEAM}"), k("webhook_routes")]

    async def result(self, host: str, lease_id: str, task_id: str, attempt: int, report: bytes) -> int:
        return await self._call("result", self._result_keys(host, task_id),
                                host, lease_id, task_id, attempt, report, self.digest, RETENTION_MS, TEAM)

    async def result_next(self, host: str, lease_id: str, task_id: str, attempt: int, report: bytes) -> bytes:
        """A result asking ``next``: the answer's JSON, with the device's next assignment or null."""
        return await self._call("result_next", [*self._result_keys(host, task_id), self._key("queue")],
                                host, lease_id, task_id, attempt, report, self.digest, RETENTION_MS, TEAM,
                                f"l_{secrets.token_hex(16)}", LEASE_TTL_MS, self._key("lease:"))

    async def lifecycle(self, n: int, body: dict[str, object]) -> None:
        host = f"h{n}"
        await self.create(f"{host}-d0", body)
        claimed = await self.claim(host)
        assert claimed is not None, "the device was free: its task is assigned and claimable"
        assignment = orjson.loads(claimed)
        task_id, lease_id, attempt = assignment["task_id"], assignment["lease_id"], assignment["attempt"]
        await self.renew(host, lease_id, task_id, attempt,
                         orjson.dumps({"step_index": 1, "status": "running", "summary": "Opened Settings"}))
        await self.result(host, lease_id, task_id, attempt,
                          orjson.dumps({"status": "succeeded", "failure_reason": None, "metadata": {"steps": 3}}))


class TetherScripts(Lifecycles):
    """Tether's own four scripts, through ``coordinator.state.store.Store`` as the HTTP handlers call
    them, driven exactly as ``LifecycleFloor`` is: their gap to the floor is the scripts' alone,
    with no HTTP and no coordinator in it."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.store = Store(AutoPipelinedTransport(redis), Keys(prefix), host_offline_after_ms=3_600_000)
        self._hosts: list[HostPrincipal] = []

    async def load(self, hosts: int) -> None:
        await self.store.load_scripts()
        for n in range(hosts):
            host = HostPrincipal(f"h{n}", "static", secrets.token_hex(32))
            device = {"device_id": f"h{n}-d0", "driver": "adb", "status": "available",
                      "attributes": '{"model":"Pixel 7","os_version":"14"}', "labels": '{"tier":"a"}'}
            snapshot = {"agent": {"version": "bench"}, "devices": [device]}
            await self.store.heartbeat(host, orjson.dumps(snapshot).decode())
            self._hosts.append(host)

    async def lifecycle(self, n: int, body: dict[str, object]) -> None:
        host = self._hosts[n]
        task = parse_task(TaskCreate.model_validate({**body, "device_id": f"h{n}-d0"}), 86_400_000)
        await self.store.create_task({**task, "id": f"t_{secrets.token_hex(12)}"})
        lease_id = f"l_{secrets.token_hex(16)}"
        claimed = await self.store.claim(host, "", lease_id, LEASE_TTL_MS)
        assert claimed is not None, "the device was free: its task is assigned and claimable"
        task_id, attempt = claimed.assignment["task_id"], claimed.assignment["attempt"]
        progress = orjson.dumps({"status": "running", "step_index": 1, "summary": "Opened Settings"}).decode()
        await self.store.renew(host, lease_id, task_id, attempt, LEASE_TTL_MS, progress)
        await self.store.record_result(host, task_id, attempt, lease_id,
                                       '{"failure_reason":null,"metadata":{"steps":3},"status":"succeeded"}')
