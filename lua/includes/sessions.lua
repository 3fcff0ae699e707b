--[[
  Live sessions (PROTOCOL.md, "Live sessions"): a task of kind `session` carries commands, one at
  a time, from an operator to its host and each command's answer back.

  Keys of one session (derived from the key base, so in the deployment's slot):
    commands:<task>       hash  command id -> the command JSON {command_id, seq, action (JSON
                                text), kind, actor, actor_id, sent_at, delivered_at, and once
                                answered: status (done | failed), answer (JSON text), answered_at}
    command_log:<task>    zset  command id -> its seq: the recording, oldest first (the last
                                SESSION_COMMANDS_KEPT; older ones are dropped with their record)
    command_queue:<task>  list  the ids of the commands not answered yet, in order (at most
                                SESSION_COMMANDS_WAITING_MAX)
    command_events:<task> list  its `command` and `command_answered` events, oldest first (the last
                                TASK_EVENTS_KEPT): its history holds them here, not in the task's
                                record, so no command's script decodes a record that grows with
                                the session (GET .../events merges the two)
    session_deadlines     zset  running session -> its next deadline (ms): the earlier of its idle
                                timeout (from its last command or answer) and its max duration
  The long-poll's wake-ups (includes/wakeups.lua) are registered under two topics per session,
  neither of which is a host id ('>' is no id character): `commandsTopic` (the host's commands
  poll, woken by a command, an end or a cancel) and `answersTopic` (operators waiting on one of
  its commands, woken by an answer or by the session's end).

  Functions:
    commandsTopic(taskId), answersTopic(taskId)   the wake-up topics
    scheduleSession(S, task)                      its next deadline in session_deadlines
    sessionOf(task)                               what a session's assignment carries:
                                                  {idle_timeout_s, max_duration_s}; nil for
                                                  any other task
    drivenSession(S, taskId, owner, running)      the session task an operator asks about, or nil
                                                  and the refusal (owner '': any; running: one
                                                  still queued or assigned is refused too)
    requestEnd(S, task, now, reason)              end_requested with its end reason, the host woken
    commandEvent(S, task, kind, now, fields)      a command's event: on the feed, as taskEvent's,
                                                  and in command_events (not the task's record)
    sessionEnded(S, task)                         a session reached its terminal status: its
                                                  queue and deadline go, every waiter is woken

  Invariants kept: a command is answered at most once (the first answer stands); the queue holds
  exactly the commands of the recording still pending while the session runs, and is empty once
  it ended; every key of a session is bounded (queue 16, recording SESSION_COMMANDS_KEPT) and
  deleted with the task (lua/purgeTasks); no step's work grows with the recording.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/wakeups"

local function commandsTopic(taskId)
  return 'commands>' .. taskId
end

local function answersTopic(taskId)
  return 'answers>' .. taskId
end

-- As taskEvent (includes/events.lua), with the history's copy in the session's own capped list:
-- a session adds two events a command, and a record that carried them would grow to
-- TASK_EVENTS_KEPT events that each of a command's four scripts decodes (docs/benchmarks.md, 16e).
local function commandEvent(S, task, kind, now, fields)
  local event = {at = now, type = kind, attempt = task.attempt, host_id = task.host_id,
                 device_id = task.device_id or task.target_device, status = task.status,
                 actor = S.actor, actor_id = S.actor_id}
  for name, value in pairs(fields) do
    event[name] = value
  end
  local key = derived(S, 'command_events', task.id)
  if rcall('RPUSH', key, cjson.encode(event)) > TASK_EVENTS_KEPT then
    rcall('LPOP', key)
  end
  event.task_id, event.team, event.run_id = task.id, task.team, task.run_id
  rcall('XADD', S.key.feed, 'MAXLEN', '~', FEED_EVENTS_KEPT, '*', 'e', cjson.encode(event))
end

local function scheduleSession(S, task)
  local idle = (task.active_at or task.started_at) + task.idle_timeout_ms
  local most = task.started_at + task.max_duration_ms
  rcall('ZADD', S.key.session_deadlines, math.min(idle, most), task.id)
end

local function sessionOf(task)
  if task.kind ~= 'session' then
    return nil
  end
  return {idle_timeout_s = task.idle_timeout_ms / 1000, max_duration_s = task.max_duration_ms / 1000}
end

-- The session task `taskId` an operator's request names: nil and the refusal when there is no
-- such task, it is no session, `owner` ('' for any) did not create it, or, asked `running`, it is
-- still queued or assigned.
local function drivenSession(S, taskId, owner, running)
  local task = getJson(S.key.tasks, taskId)
  if not task then
    return nil, {E.NOT_FOUND}
  end
  if task.kind ~= 'session' then
    return nil, {E.NOT_A_SESSION}
  end
  if owner ~= '' and task.creator_token ~= owner then
    return nil, {E.NOT_SESSION_OWNER}
  end
  if running and (task.status == 'queued' or task.status == 'assigned') then
    return nil, {E.SESSION_NOT_RUNNING, task.status}
  end
  return task
end

-- Ask the host to end a running session (operator `end`, idle timeout, max duration): it reports
-- `succeeded` with metadata.end_reason. Whether this asked (false: already asked). The caller saves.
local function requestEnd(S, task, now, reason)
  if task.end_requested then
    return false
  end
  task.end_requested = true
  task.end_reason = reason
  task.updated_at = now
  rcall('ZREM', S.key.session_deadlines, task.id)
  taskEvent(S, task, 'end_requested', now, reason)
  wakePolls(S, commandsTopic(task.id), now)
  return true
end

local function sessionEnded(S, task, now)
  rcall('ZREM', S.key.session_deadlines, task.id)
  rcall('DEL', derived(S, 'command_queue', task.id))
  wakePolls(S, commandsTopic(task.id), now)
  wakePolls(S, answersTopic(task.id), now)
end
