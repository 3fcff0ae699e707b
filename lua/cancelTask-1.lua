--[[
  Cancel a task: at once when it is queued or assigned; a running one is asked to stop.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     task id
    ARGV[7]     owner: the token id the task must have been created by ("" for any task: a
                caller allowed to cancel every task)
    ARGV[8]     actor: the operator's name, on every event of this step
    ARGV[9]     actor id: its token's id ("admin" for the bootstrap token), on the same events
  Output:
    {0, task JSON}  cancelled, or cancel requested (running), or already cancelled
    {NOT_FOUND}
    {NOT_OWNER}  an owner was given and the task was not created by it; nothing changed
    {TASK_TERMINAL, task JSON}  it already succeeded or failed

  Invariant: a cancelled task holds no device and sits in no queue; a running task keeps its
  lease until the agent reports or the lease expires (then it becomes cancelled, not requeued).
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/tasks"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[8], ARGV[9])
local taskId = ARGV[6]
local owner = ARGV[7]

local task = getJson(S.key.tasks, taskId)
if not task then
  return {E.NOT_FOUND}
end
if owner ~= '' and task.creator_token ~= owner then
  return {E.NOT_OWNER}
end
if not cancelTaskNow(S, task, nowMs()) then
  return {E.TASK_TERMINAL, cjson.encode(task)}
end
return {0, cjson.encode(task)}
