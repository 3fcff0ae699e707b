--[[
  An operator's command for a running session: recorded, queued behind the session's pending
  commands, and the host's waiting commands poll woken (PROTOCOL.md, "Live sessions").

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     task id
    ARGV[7]     command id (minted by the service)
    ARGV[8]     the action, as JSON text (validated by the service: coordinator/api/bodies.py)
    ARGV[9]     the action's kind (`tap`, `observe`, ...), named by its events
    ARGV[10]    actor: the operator's name; ARGV[11] its token's id (or "admin")
    ARGV[12]    the token the session must have been created by, or "" (an admin: any session)
    ARGV[13]    id of the process whose request waits for the answer, or "" when it will not wait
    ARGV[14]    how long that request waits (ms)
  Keys it touches besides those of its includes:
    commands:<task>, command_log:<task>, command_queue:<task>, command_events:<task>, session_deadlines
                (includes/sessions.lua); polls:answers><task> (the request's wait, registered)
  Output:
    {0, command JSON}
    {NOT_FOUND}            no such task
    {NOT_A_SESSION}        the task is no session
    {NOT_SESSION_OWNER}    another token created it (and the caller is no admin)
    {SESSION_NOT_RUNNING, status}   queued or assigned
    {SESSION_ENDED}        ended, or asked to end (an end, a cancel, a timeout)
    {TOO_MANY_COMMANDS}    SESSION_COMMANDS_WAITING_MAX commands wait already

  Cost: O(1) commands (a dozen), whatever the session's recording: one ZPOPMIN and HDEL drop the
  recording's oldest past SESSION_COMMANDS_KEPT; the task's record (a few hundred bytes: its
  command count and last activity) is rewritten, and the command's event goes to the session's
  own capped list, so no command's cost grows with the session's age.

  Invariants: a command is queued only for a running session not asked to end, so every queued
  command either reaches the host or is dropped with the session's end (includes/sessions.lua,
  sessionEnded); at most SESSION_COMMANDS_WAITING_MAX wait; the request's wait is registered in
  this step, so an answer made after it always wakes it.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/wakeups"
--- @include "includes/sessions"
local S = deployment(KEYS, ARGV)
local taskId, commandId, actionJson, actionKind = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local owner, processId, waitMs = ARGV[12], ARGV[13], tonumber(ARGV[14])
setActor(S, ARGV[10], ARGV[11])

local task, refused = drivenSession(S, taskId, owner, true)
if not task then
  return refused
end
if task.status ~= 'running' or task.end_requested or task.cancel_requested then
  return {E.SESSION_ENDED}
end
local queueKey = derived(S, 'command_queue', taskId)
if rcall('LLEN', queueKey) >= SESSION_COMMANDS_WAITING_MAX then
  return {E.TOO_MANY_COMMANDS}
end

local now = nowMs()
task.commands_sent = (task.commands_sent or 0) + 1
local command = {command_id = commandId, seq = task.commands_sent, action = actionJson, kind = actionKind,
                 actor = S.actor, actor_id = S.actor_id, sent_at = now}
local encoded = cjson.encode(command)
local commandsKey, logKey = derived(S, 'commands', taskId), derived(S, 'command_log', taskId)
rcall('HSET', commandsKey, commandId, encoded)
rcall('ZADD', logKey, command.seq, commandId)
if rcall('ZCARD', logKey) > SESSION_COMMANDS_KEPT then
  local oldest = rcall('ZPOPMIN', logKey)
  rcall('HDEL', commandsKey, oldest[1])
end
rcall('RPUSH', queueKey, commandId)
task.active_at = now
task.updated_at = now
scheduleSession(S, task)
commandEvent(S, task, 'command', now, {command_id = commandId, action = actionKind})
saveTask(S, task, task.status)
wakePolls(S, commandsTopic(taskId), now)
if processId ~= '' and waitMs > 0 then
  registerPoll(S, answersTopic(taskId), processId, waitMs, now)
end
return {0, encoded}
