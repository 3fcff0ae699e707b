--[[
  One command of a session, and its answer if it has one; a request that will wait for the
  answer is registered in the same step (PROTOCOL.md, "Live sessions": GET .../commands/{id}, and
  the wait of POST .../commands).

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     task id
    ARGV[7]     command id
    ARGV[8]     id of the process whose request waits, or "" when it will not wait
    ARGV[9]     how long that request waits (ms)
  Keys it touches besides those of its includes:
    commands:<task> (read); polls:answers><task> (the wait, registered while the command is
    pending and the session has not ended)
  Output:
    {0, command JSON, the task's status, ended (1 once the session reached its terminal status)}
    {NOT_FOUND}        no such task, or no such command of it (another session's, or dropped
                       from the recording)
    {NOT_A_SESSION}

  Cost: O(1) (HGET tasks, HGET commands, and the registration's ZADD, PTTL).

  Invariant: a wait is registered in the step that saw the command pending and its session
  not ended, so its answer, or the session's end, always wakes it.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/wakeups"
--- @include "includes/sessions"
local S = deployment(KEYS, ARGV)
local taskId, commandId, processId, waitMs = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])

local task, refused = drivenSession(S, taskId, '', false)
if not task then
  return refused
end
local raw = rcall('HGET', derived(S, 'commands', taskId), commandId)
if not raw then
  return {E.NOT_FOUND}
end
local ended = task.status == 'succeeded' or task.status == 'failed' or task.status == 'cancelled'
if not ended and processId ~= '' and waitMs > 0 and not cjson.decode(raw).answered_at then
  registerPoll(S, answersTopic(taskId), processId, waitMs, nowMs())
end
return {0, raw, task.status, ended and 1 or 0}
