--[[
  A session's host poll (POST /internal/v1/hosts/{host}/leases/{lease}/commands): the answers of
  the commands it ran recorded, its lease renewed, and the next command handed out.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..10]  the lease the request presents: host id, lease id, task id, attempt, SHA-256 of the
                 credential it came with (includes/common.lua, requestLease)
    ARGV[11]    lease TTL (ms)
    ARGV[12]    the answers, JSON [{command_id, status, screen (or absent), answer (JSON text)}]
    ARGV[13]    id of the process serving the poll, or "" when it will not wait
    ARGV[14]    how long the poll will wait if it finds nothing (ms)
  Keys it touches besides those of its includes:
    lease_deadlines, lease:<task>, progress, feed (the renewal: includes/renewal.lua)
    commands:<task>, command_queue:<task>, command_events:<task>, session_deadlines
                (includes/sessions.lua)
    polls:commands><task> (the poll's wait), polls:answers><task> (operators woken by an answer)
  Output:
    {0, lease expiry (ms), cancel requested (0|1), end requested (0|1), commands JSON [{command_id,
     action (JSON text)}], end reason ('' unless asked to end)}  (at most one command: the oldest
     not answered)
    {LEASE_NOT_OWNED} | {LEASE_REPLACED} | {LEASE_EXPIRED}   as a renewal's, nothing changed
    {NOT_A_SESSION}   a live lease of a task that is no session
    {REVOKED}

  Cost: O(answers) commands (at most SESSION_COMMANDS_WAITING_MAX answers, a few commands each:
  HGET, HSET, LREM of a list of at most 16) plus a renewal's; the task's record is rewritten once
  when an answer was recorded.

  Invariants: an answer is recorded only for a pending command of this very session and lease
  (a foreign command id, or one answered already, changes nothing: the first answer stands), and
  wakes the operators waiting on the session; commands are handed out one at a time, in order, the
  oldest unanswered one again at every poll until it is answered; none once the session is asked
  to end or cancelled. A refused lease records nothing. A poll that finds nothing is registered
  in the same step, so a command queued after it always wakes it.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/wakeups"
--- @include "includes/renewal"
--- @include "includes/sessions"
local S = deployment(KEYS, ARGV)
local hostId, leaseId, taskId, attempt = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local credential, ttl, answersJson = ARGV[10], tonumber(ARGV[11]), ARGV[12]
local processId, waitMs = ARGV[13], tonumber(ARGV[14])

if credentialRevoked(S.key.revoked_tokens, credential) then
  return {E.REVOKED}
end
local now = nowMs()
local renewed = renewOne(S, ttl, hostId, leaseId, taskId, attempt, '', now)
if renewed[1] ~= 0 then
  return renewed
end
local task = getJson(S.key.tasks, taskId)
if task.kind ~= 'session' then
  return {E.NOT_A_SESSION}
end

local commandsKey, queueKey = derived(S, 'commands', taskId), derived(S, 'command_queue', taskId)
local answered = false
for _, answer in ipairs(cjson.decode(answersJson)) do
  local raw = rcall('HGET', commandsKey, answer.command_id)
  local command = raw and cjson.decode(raw)
  if command and not command.answered_at then
    command.status = answer.status
    command.answer = answer.answer
    command.answered_at = now
    rcall('HSET', commandsKey, command.command_id, cjson.encode(command))
    rcall('LREM', queueKey, 1, command.command_id)
    S.actor, S.actor_id = command.actor, command.actor_id  -- the event names who sent it
    commandEvent(S, task, 'command_answered', now,
                 {command_id = command.command_id, action = command.kind, screen = answer.screen})
    answered = true
  end
end
if answered then
  S.actor, S.actor_id = nil, nil
  task.active_at = now
  task.updated_at = now
  if not task.end_requested then
    scheduleSession(S, task)
  end
  saveTask(S, task, task.status)
  wakePolls(S, answersTopic(taskId), now)
end

local commands = {}
if not task.end_requested and not task.cancel_requested then
  local nextId = rcall('LINDEX', queueKey, 0)
  if nextId then
    local command = cjson.decode(rcall('HGET', commandsKey, nextId))
    if not command.delivered_at then
      command.delivered_at = now
      rcall('HSET', commandsKey, nextId, cjson.encode(command))
    end
    commands[1] = {command_id = nextId, action = command.action}
  elseif processId ~= '' and waitMs > 0 then
    registerPoll(S, commandsTopic(taskId), processId, waitMs, now)
  end
end
return {0, renewed[2], renewed[3], task.end_requested and 1 or 0,
        #commands > 0 and cjson.encode(commands) or '[]', task.end_reason or ''}
