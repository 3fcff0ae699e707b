--[[
  Reaper: queued tasks past their queue deadline fail with failure_reason `queue_timeout`.

  Input:
    KEYS[1..16] the scheduling keys (includes/schedule.lua); KEYS[12] queue_deadlines is the
                index this sweep reads
    ARGV[1..5]  the scheduling arguments
    ARGV[6]     at most this many deadlines per call
  Output:
    {0, number of deadlines taken, number of tasks failed}

  Invariant: a deadline is acted on once; only a task still queued (and whose deadline this is)
  fails, so an assignment that won the race keeps its task.
]]
--- @include "includes/common"
--- @include "includes/schedule"
local S = scheduler(KEYS, ARGV)
local limit = tonumber(ARGV[6])

local now = nowMs()
local due = rcall('ZRANGEBYSCORE', S.queueDeadlines, '-inf', now, 'LIMIT', 0, limit)
local failed = 0
for _, taskId in ipairs(due) do
  rcall('ZREM', S.queueDeadlines, taskId)
  local task = getJson(S.tasks, taskId)
  if task and task.status == 'queued' and task.queue_deadline and task.queue_deadline <= now then
    unqueueTask(S, task)
    task.status = 'failed'
    task.failure_reason = 'queue_timeout'
    taskEvent(S, task, 'queue_timeout', now, 'queue_timeout')
    finishTask(S, task, 'queued', now)
    failed = failed + 1
  end
end
if failed > 0 then
  rcall('HINCRBY', S.stats, 'queue_timeouts', failed)
end
return {0, #due, failed}
