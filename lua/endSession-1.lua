--[[
  An operator ends a running session (POST /api/v1/tasks/{task}/end): the host is told
  (`end_requested`, its waiting poll woken) and reports `succeeded` with end_reason `ended`.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     task id
    ARGV[7]     actor: the operator's name; ARGV[8] its token's id (or "admin")
    ARGV[9]     the token the session must have been created by, or "" (an admin: any session)
  Keys it touches besides those of its includes:
    session_deadlines, polls:commands><task> (includes/sessions.lua)
  Output:
    {0, task JSON}   asked to end now, or already asked, or already ended (idempotent)
    {NOT_FOUND} | {NOT_A_SESSION} | {NOT_SESSION_OWNER}
    {SESSION_NOT_RUNNING, status}   queued or assigned (cancel it instead)

  Cost: O(1) commands.

  Invariant: end_requested is set once, with the first reason that asked (an end, an idle
  timeout, a max duration); a session that has ended is left as it is.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/sessions"
local S = deployment(KEYS, ARGV)
local taskId, owner = ARGV[6], ARGV[9]
setActor(S, ARGV[7], ARGV[8])

local task, refused = drivenSession(S, taskId, owner, true)
if not task then
  return refused
end
if task.status == 'running' and requestEnd(S, task, nowMs(), 'ended') then
  return {0, saveTask(S, task, task.status)}
end
return {0, cjson.encode(task)}
