--[[
  Reaper: queued tasks past their queue deadline fail with failure_reason `queue_timeout`.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     at most this many deadlines per call
  The index this sweep reads: queue_deadlines.
  Output:
    {0, number of deadlines taken, number of tasks failed}

  Invariant: a deadline is acted on once; only a task still queued (and whose deadline this is)
  fails, so an assignment that won the race keeps its task.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/tasks"
local S = deployment(KEYS, ARGV)
local limit = tonumber(ARGV[6])

local now = nowMs()
local failed = 0
local taken = sweepDue(S.key.queue_deadlines, S.key.tasks, now, limit, function(_, task)
  if task and task.status == 'queued' and task.queue_deadline and task.queue_deadline <= now then
    unqueueTask(S, task)
    task.status = 'failed'
    task.failure_reason = 'queue_timeout'
    taskEvent(S, task, 'queue_timeout', now, 'queue_timeout')
    finishTask(S, task, 'queued', now)
    failed = failed + 1
  end
end)
count(S, 'queue_timeouts', failed)
return {0, taken, failed}
