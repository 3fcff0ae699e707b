--[[
  Reaper: end the leases whose deadline has passed. Each one's task is requeued as attempt + 1,
  failed with `lease_expired` once max_attempts is spent, or cancelled if a cancel was requested.

  Input:
    KEYS[1..19] the scheduling keys (includes/schedule.lua)
    KEYS[20]    leases           hash  lease id -> {task_id, host_id, attempt, device_id, claim}
    KEYS[21]    lease_deadlines  zset  lease id -> expiry (ms); the index this sweep reads
    KEYS[22]    progress         hash  task id -> latest progress JSON
    ARGV[1..5]  the scheduling arguments
    ARGV[6]     at most this many leases per call
  Output:
    {0, number of leases ended}

  Invariants: a lease is ended exactly once (removed from the index in the step that acts on it),
  so two reapers sweeping at once are safe; only a task's current lease moves the task. The
  lease's claim record stays (until retention deletes the task), so a late replay of its claim
  id learns the lease has ended (204). The device of an expired lease is released but not marked
  available: the agent may still be stopping the stale work, and its next heartbeat says when
  the device is really idle.
]]
--- @include "includes/common"
--- @include "includes/schedule"
local S = scheduler(KEYS, ARGV)
local leasesKey = KEYS[20]
local deadlinesKey = KEYS[21]
local progressKey = KEYS[22]
local limit = tonumber(ARGV[6])

local now = nowMs()
local due = rcall('ZRANGEBYSCORE', deadlinesKey, '-inf', now, 'LIMIT', 0, limit)
for _, leaseId in ipairs(due) do
  rcall('ZREM', deadlinesKey, leaseId)
  local lease = getJson(leasesKey, leaseId)
  local task = lease and getJson(S.tasks, lease.task_id)
  if task and task.status == 'running' and task.lease_id == leaseId then
    rcall('HDEL', progressKey, task.id)
    count(S, 'lease_expiries')
    endRun(S, task, task.attempt, now, 'lease_expired')
    local previous = task.status
    if task.cancel_requested or task.attempt >= task.max_attempts then
      task.status = task.cancel_requested and 'cancelled' or 'failed'
      task.failure_reason = 'lease_expired'
      finishTask(S, task, previous, now)
      taskEvent(S, task, 'lease_expired', now, 'lease_expired')
      releaseDevice(S, task, now, false)
    else
      nextAttempt(task, now)
      requeueTask(S, task, now, 'requeued', 'lease_expired')
    end
  end
end
return {0, #due}
