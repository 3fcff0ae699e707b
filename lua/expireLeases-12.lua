--[[
  Reaper: end the leases whose deadline has passed. Each one's task is requeued as attempt + 1,
  failed with `lease_expired` once max_attempts is spent, or cancelled if a cancel was requested.

  Input:
    KEYS[1..9]  the scheduling keys (includes/schedule.lua)
    KEYS[10]    leases           hash  lease id -> {task_id, host_id, attempt, device_id, claim}
    KEYS[11]    lease_deadlines  zset  lease id -> expiry (ms); the index this sweep reads
    KEYS[12]    progress         hash  task id -> latest progress JSON
    ARGV[1..2]  the scheduling arguments
    ARGV[3]     at most this many leases per call
  Output:
    {0, number of leases ended}

  Invariants: a lease is ended exactly once (removed from the index in the step that acts on it),
  so two reapers sweeping at once are safe; only a task's current lease moves the task. The
  lease's claim record stays, so a late replay of its claim id learns the lease has ended (204).
  The device of an expired lease is released but not marked available: the agent may still be
  stopping the stale work, and its next heartbeat says when the device is really idle.
]]
--- @include "includes/common"
--- @include "includes/schedule"
local S = scheduler(KEYS, ARGV)
local leasesKey = KEYS[10]
local deadlinesKey = KEYS[11]
local progressKey = KEYS[12]
local limit = tonumber(ARGV[3])

local now = nowMs()
local due = rcall('ZRANGEBYSCORE', deadlinesKey, '-inf', now, 'LIMIT', 0, limit)
for _, leaseId in ipairs(due) do
  rcall('ZREM', deadlinesKey, leaseId)
  local lease = getJson(leasesKey, leaseId)
  local task = lease and getJson(S.tasks, lease.task_id)
  if task and task.status == 'running' and task.lease_id == leaseId then
    rcall('HDEL', progressKey, task.id)
    local previous = task.status
    task.updated_at = now
    if task.cancel_requested then
      task.status = 'cancelled'
      task.failure_reason = 'lease_expired'
      task.finished_at = now
      saveTask(S, task, previous)
      releaseDevice(S, task, now, false)
    elseif task.attempt >= task.max_attempts then
      task.status = 'failed'
      task.failure_reason = 'lease_expired'
      task.finished_at = now
      saveTask(S, task, previous)
      releaseDevice(S, task, now, false)
    else
      task.attempt = task.attempt + 1
      requeueTask(S, task, now)
    end
  end
end
return {0, #due}
