--[[
  Reaper: running sessions past their idle timeout or their max duration are asked to end
  (`end_requested`, end_reason `idle_timeout` or `max_duration`); their agents report.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     at most this many due sessions per call
  Keys it touches besides those of its includes:
    session_deadlines  zset  running session -> its next deadline (ms); the index this sweep reads
  Output:
    {0, due entries taken, sessions asked to end}

  Cost: O(limit): due entries only (a range of the index by score), never every session.

  Invariants: a session is asked to end once, when its deadline has passed on Redis' clock: an
  idle one whose last command or answer came later than its deadline was scheduled is
  rescheduled, not ended; an entry of a session no longer running (or already asked to end)
  leaves the index.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/sessions"
local S = deployment(KEYS, ARGV)
local limit = tonumber(ARGV[6])
local now = nowMs()
local taken, ended = 0, 0
for _, taskId in ipairs(rcall('ZRANGEBYSCORE', S.key.session_deadlines, '-inf', now, 'LIMIT', 0, limit)) do
  taken = taken + 1
  local task = getJson(S.key.tasks, taskId)
  if not task or task.status ~= 'running' or task.end_requested or task.cancel_requested then
    rcall('ZREM', S.key.session_deadlines, taskId)
  else
    local reason
    if now >= task.started_at + task.max_duration_ms then
      reason = 'max_duration'
    elseif now >= (task.active_at or task.started_at) + task.idle_timeout_ms then
      reason = 'idle_timeout'
    end
    if reason then
      requestEnd(S, task, now, reason)
      saveTask(S, task, task.status)
      ended = ended + 1
    else
      scheduleSession(S, task)
    end
  end
end
return {0, taken, ended}
