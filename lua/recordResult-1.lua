--[[
  Record the terminal result of the current attempt, once; release its device. A retryable
  failure requeues the task as the next attempt while attempts remain.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     host id
    ARGV[7]     task id
    ARGV[8]     attempt
    ARGV[9]     lease id
    ARGV[10]    result JSON {status, failure_reason, metadata, retryable?} as the service
                normalised it
    ARGV[11]    SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[12]    "1": eager dispatch asked (`next`), else "0"
    ARGV[13]    lease id for the next assignment's lease (minted by the service; "" without `next`)
    ARGV[14]    lease TTL (ms)
  Keys it touches besides those of its includes:
    lease_deadlines  zset  task id -> its running lease's expiry (ms)
    progress         hash  task id -> latest progress JSON of its running attempt (or of its
                           last, once it ended)
    revoked_tokens   set   SHA-256 digests of revoked host tokens
    claims           hash  "host id\0next\0lease id" -> the next assignment a result with
                           that lease dispatched (includes/dispatch.lua; a claim id has no NUL)
  Output:
    {0, recorded at (ms), 0, task status, next}  recorded now; the status is what the task
                                           became (`queued` when a retryable failure requeued it)
    {0, recorded at (ms), 1, task status, next}  the identical report was recorded before (at
                                           that time): nothing changes but the next
                                           assignment's lease, extended as a claim replay's
    `next` (with ARGV[12] "1" only): the next assignment's JSON, exactly as a claim returns it,
    or false for none; then the ms its attempt waited from queued to dispatched (-1 for a replay)
    {RESULT_CONFLICT}  a different report for an attempt already recorded
    {STALE_ATTEMPT}    a newer attempt exists
    {LEASE_NOT_OWNED}  unknown lease (or deleted with its task by retention), another host's,
                       or not this task and attempt
    {LEASE_EXPIRED}    the coordinator already ended this attempt (expired past max_attempts,
                       or cancelled), so there is nothing to record
    {REVOKED}

  Commands, a succeeded result that frees a device nobody waits for (bench/footprint.py, row
  8a: 21 with the FCALL, no webhook registered), each for a reason:
    HGET tasks, SISMEMBER revoked_tokens, TIME   the record, the credential, the clock
    ZREM lease_deadlines, DEL lease:<task>   the lease ends (its last progress stays with the
                      ended task, shown nowhere, until retention deletes both: purgeTasks; a
                      retried task's is deleted, so its next attempt starts with none)
    LPUSH device_runs:<device>   the device's history (trimmed once a hundred runs, no expiry
                      while the device is pooled: includes/events.lua, endRun)
    XADD feed, ZADD tasks_by_status, HSET tasks, ZADD retention   the event, the listing, the
                      record, and when retention deletes it
    HGET webhook_routes   whether a webhook wants `task.ended` (then an XADD webhook_outbox for
                      each one that does: includes/events.lua, taskEnded)
    HDEL reservations the device's holder dropped (a running task holds its device: not read)
    HINCRBY teams, HINCRBY team_usage:<team>, HMGET teams   the team's devices held, its
                      device time this hour (by minute: a minute's first also drops the fields an
                      hour old), and whether the release took it below its cap (then its waiting
                      work is placed)
    HGET devices      the device's record: its host, driver, status
    HEXISTS disabled_devices, HMGET host_state:<host>   whether the device may take work:
                      "schedulable", the one predicate every script reads (DESIGN.md, "One
                      notion of each state"), and which waiting tasks its host may run, the
                      host's part in one read
    EXISTS device_targets:<device> driver_targets:<driver> label_targets:<driver>|<label>...
                      whether any target waits that the device could fit (then the targets found
                      and the teams' heads of those it fits are read, never a queue: bounded by
                      the targets and teams waiting, includes/placement.lua, pickByShare)
    ZADD free_devices:<driver>, ZADD free_label:<driver>|<label>...   nothing waits: the device is
                      free, in its driver's set and each of its labels', idle since now

  Eager dispatch (`next`, PROTOCOL.md, results): when the released device takes a waiting task
  in this step by the order (includes/placement.lua, feedDevice or placeTeamWork), that task is
  not queued for its host's claim but dispatched at once under a fresh lease by the claim's own
  helper (includes/dispatch.lua, dispatchTask), its assignment kept for a replay. A device that
  takes nothing (draining or stalled host, disabled or unavailable device, nothing waiting) is
  free as usual, and a retryable failure (the device or its agent going away) asks for nothing.
  Its cost over a result without it: dispatchTask's (a record already read and encoded once, an
  XADD, a ZADD of the status index, the lease's ZADD and SET, the HSET of `claims`), with no
  RPUSH, claim deadline or wake-up, and none of the claim's own request.

  Invariants: one result per attempt; a replay never dispatches: it answers the next assignment
  its first report dispatched while that lease is live (extended), false once it ended; a replay
  of any attempt's report gets the answer it first got, even after later attempts reported; a
  stale or conflicting report changes nothing; the task leaves running, its lease and progress
  stop being current, and its device takes the next waiting task, all in one step. A result that
  arrives after the lease deadline but before the reaper has requeued the attempt is still the
  current attempt's, and is recorded. A task whose cancel was requested is never retried.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/tasks"
--- @include "includes/runs"
--- @include "includes/dispatch"
local S = deployment(KEYS, ARGV)
local hostId, taskId, attempt, leaseId = ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9]
local resultJson, credential = ARGV[10], ARGV[11]
local eager, nextLeaseId, ttl = ARGV[12] == '1', ARGV[13], tonumber(ARGV[14])
local nextField = indexMember(hostId, 'next', leaseId)

local task = getJson(S.key.tasks, taskId)
local lease, failure = presentedLease(S.key.revoked_tokens, credential, leaseId, hostId, taskId, attempt, task)
if not lease then
  return {failure}
end
-- The replay first: an attempt's identical report, repeated after its response was lost, is
-- answered as it was, even though later attempts exist and have reported since (a retryable
-- failure's report stays with its lease in `leases`; the last report is `result`).
local function recordedReport()
  if task.result and task.result_lease == leaseId then
    return task.result_report, task.result.recorded_at, task.result.task_status or task.status
  end
  for _, held in ipairs(task.leases or {}) do
    if type(held) == 'table' and held.id == leaseId and held.report then
      return held.report, held.recorded_at, 'queued'
    end
  end
end
local earlierReport, earlierAt, earlierStatus = recordedReport()
if earlierReport then
  if earlierReport == resultJson then
    if eager then
      return {0, earlierAt, 1, earlierStatus, replayAssignment(S, nextField, hostId, ttl, nowMs()) or false, -1}
    end
    return {0, earlierAt, 1, earlierStatus}
  end
  return {E.RESULT_CONFLICT}
end
if task.attempt > attempt then
  return {E.STALE_ATTEMPT}
end
if task.status ~= 'running' or task.lease_id ~= leaseId then
  return {E.LEASE_EXPIRED}
end

local now = nowMs()
local report = cjson.decode(resultJson)
local retry = report.retryable == true and report.status == 'failed'
  and task.attempt < task.max_attempts and not task.cancel_requested
rcall('ZREM', S.key.lease_deadlines, taskId)
rcall('DEL', derived(S, 'lease', taskId))
keepLastStep(S, task)  -- a task of a run: its report names the last step (one HGET, runs only)
endRun(S, task, attempt, now, report.status)
task.result_report = resultJson
task.result_lease = leaseId
task.failure_reason = report.failure_reason
taskEvent(S, task, 'result', now, report.failure_reason, report.status)

if retry then
  task.result = {recorded_at = now, attempt = attempt, task_status = 'queued'}
  for _, held in ipairs(task.leases or {}) do
    if type(held) == 'table' and held.id == leaseId then
      held.report = resultJson
      held.recorded_at = now
    end
  end
  count(S, 'retries')
  rcall('HDEL', S.key.progress, taskId)  -- the next attempt starts with none
  nextAttempt(task, now)
  requeueTask(S, task, now, 'requeued', 'retryable_failure')
  if eager then
    return {0, now, 0, 'queued', false, -1}
  end
  return {0, now, 0, 'queued'}
end

local previous = task.status
task.status = report.status
task.result = {recorded_at = now, attempt = attempt, task_status = report.status}
finishTask(S, task, previous, now)
if eager then
  S.eagerDevice, S.eagerHost = task.device_id, hostId
end
releaseDevice(S, task, now, true)
if not eager then
  return {0, now, 0, task.status}
end
local nextTask = S.eagerTask
if not nextTask then
  return {0, now, 0, task.status, false, -1}
end
local encoded = dispatchTask(S, nextTask, 'queued', hostId, nextLeaseId, ttl, nextField, now)
return {0, now, 0, task.status, encoded, now - nextTask.queued_at}
