--[[
  Record the terminal result of the current attempt, once; release its device.

  Input:
    KEYS[1..9]  the scheduling keys (includes/schedule.lua)
    KEYS[10]    leases           hash  lease id -> {task_id, host_id, attempt, device_id, claim}
    KEYS[11]    lease_deadlines  zset  lease id -> expiry (ms)
    KEYS[12]    progress         hash  task id -> latest progress JSON
    KEYS[13]    revoked_tokens   set   SHA-256 digests of revoked host tokens
    ARGV[1..2]  the scheduling arguments
    ARGV[3]     host id
    ARGV[4]     task id
    ARGV[5]     attempt
    ARGV[6]     lease id
    ARGV[7]     result JSON {status, failure_reason, metadata} as the service normalised it
    ARGV[8]     SHA-256 of the credential the request came with (revocation is bound to it)
  Output:
    {0, task JSON, 0}  recorded now
    {0, task JSON, 1}  the identical report was recorded before: nothing changes
    {RESULT_CONFLICT}  a different report for an attempt already recorded
    {STALE_ATTEMPT}    a newer attempt exists
    {LEASE_NOT_OWNED}  unknown lease, another host's, or not this task and attempt
    {LEASE_EXPIRED}    the coordinator already ended this attempt (expired past max_attempts,
                       or cancelled), so there is nothing to record
    {REVOKED}

  Invariants: one result per attempt; a stale or conflicting report changes nothing; the task
  leaves running, its lease and progress stop being current, and its device takes the next
  waiting task, all in one step. A result that arrives after the lease deadline but before the
  reaper has requeued the attempt is still the current attempt's, and is recorded.
]]
--- @include "includes/common"
--- @include "includes/schedule"
local S = scheduler(KEYS, ARGV)
local leasesKey = KEYS[10]
local deadlinesKey = KEYS[11]
local progressKey = KEYS[12]
local revokedKey = KEYS[13]
local hostId = ARGV[3]
local taskId = ARGV[4]
local attempt = tonumber(ARGV[5])
local leaseId = ARGV[6]
local resultJson = ARGV[7]
local credential = ARGV[8]

local lease, failure = presentedLease(revokedKey, credential, leasesKey, leaseId, hostId, taskId, attempt)
if not lease then
  return {failure}
end
local task = getJson(S.tasks, taskId)
if task.attempt > attempt then
  return {E.STALE_ATTEMPT}
end
if task.result and task.result_lease == leaseId then
  if task.result_report == resultJson then
    return {0, cjson.encode(task), 1}
  end
  return {E.RESULT_CONFLICT}
end
if task.status ~= 'running' or task.lease_id ~= leaseId then
  return {E.LEASE_EXPIRED}
end

local now = nowMs()
local report = cjson.decode(resultJson)
local previous = task.status
task.status = report.status
task.failure_reason = report.failure_reason
task.result_report = resultJson
task.result_lease = leaseId
task.result = {recorded_at = now, attempt = attempt}
task.finished_at = now
task.updated_at = now
saveTask(S, task, previous)

rcall('ZREM', deadlinesKey, leaseId)
rcall('HDEL', progressKey, taskId)
releaseDevice(S, task, now, true)
return {0, cjson.encode(task), 0}
