--[[
  Reaper: end the leases whose deadline has passed. Each one's task is requeued as attempt + 1,
  failed with `lease_expired` once max_attempts is spent, or cancelled if a cancel was requested.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     at most this many leases per call
  Keys it touches besides those of its includes:
    lease_deadlines  zset  task id -> its running lease's expiry (ms); the index
                           this sweep reads
    progress         hash  task id -> latest progress JSON
  Output:
    {0, number of leases ended}

  Invariants: a lease is ended exactly once (removed from the index in the step that acts on it),
  so two reapers sweeping at once are safe; only a running task moves. The ended lease stays in
  its task's record, and its claim record stays (both until retention deletes the task), so a
  late call with the lease gets its exact answer and a late replay of its claim id learns the
  lease has ended (204). The device of an expired lease is released but not marked
  available: the agent may still be stopping the stale work, and its next heartbeat says when
  the device is really idle.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/tasks"
--- @include "includes/runs"
local S = deployment(KEYS, ARGV)
local limit = tonumber(ARGV[6])

local now = nowMs()
-- (The devices let go are fed once all are: includes/placement.lua, beginReleases.)
beginReleases(S)
local taken = sweepDue(S.key.lease_deadlines, S.key.tasks, now, limit, function(taskId, task)
  rcall('DEL', derived(S, 'lease', taskId))  -- as a rule gone by its own TTL already
  if task and task.status == 'running' then
    keepLastStep(S, task)
    rcall('HDEL', S.key.progress, task.id)
    count(S, 'lease_expiries')
    endRun(S, task, task.attempt, now, 'lease_expired')
    local previous = task.status
    if task.cancel_requested or task.attempt >= task.max_attempts then
      task.status = task.cancel_requested and 'cancelled' or 'failed'
      task.failure_reason = 'lease_expired'
      taskEvent(S, task, 'lease_expired', now, 'lease_expired')
      finishTask(S, task, previous, now)
      releaseDevice(S, task, now, false)
    else
      nextAttempt(task, now)
      requeueTask(S, task, now, 'requeued', 'lease_expired')
    end
  end
end)
settleReleases(S, now)
return {0, taken}
