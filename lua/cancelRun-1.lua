--[[
  Cancel a run: every task of it not yet ended is cancelled as a task's cancel does (queued or
  assigned: at once; running: asked to stop). Idempotent.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..9]  the run the operator steers and who: run id, owner, actor, actor id (includes/runs.lua,
                steeredRun)
  Keys it touches besides those of its includes: runs, run_tasks:<run>, run_counts:<run>
  Output:
    {0, run JSON, counts}  counts: its counts by task status (runCountsReply)
    {NOT_FOUND}
    {NOT_OWNER}  an owner was given and the run was not created by it; nothing changed

  Invariant: an ended run is left as it is; afterwards no task of the run is queued or assigned,
  each running one has its cancel requested, and the run ends `cancelled` (unless every task succeeded) when its last
  task ends, in that task's step.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/tasks"
--- @include "includes/runs"
local S = deployment(KEYS, ARGV)
local run, refused = steeredRun(S, ARGV)
if not run then
  return refused
end
if run.status ~= 'running' then
  -- Ended already: nothing to cancel, and its status stands.
  return {0, cjson.encode(run), runCountsReply(S, run.id)}
end
if not run.cancel_requested then
  -- Saved before its tasks are cancelled: the step that ends its last task reads it.
  run.cancel_requested = true
  saveRun(S, run)
end
local now = nowMs()
local taskIds = rcall('ZRANGE', derived(S, 'run_tasks', run.id), 0, -1)
-- Each task read as it is cancelled (cancelling one may place another); the queued ones first,
-- so a device an assigned one lets go is never handed a task of this run about to be cancelled.
local function cancelEach(pick)
  for _, taskId in ipairs(taskIds) do
    local task = getJson(S.key.tasks, taskId)
    if task and pick(task.status) then
      cancelTaskNow(S, task, now)
    end
  end
end
cancelEach(function(status) return status == 'queued' end)
-- (The devices the assigned ones let go are fed once all are: includes/placement.lua, beginReleases.)
beginReleases(S)
cancelEach(function(status) return not TERMINAL_STATUSES[status] end)
settleReleases(S, now)
return {0, cjson.encode(getJson(S.key.runs, run.id)), runCountsReply(S, run.id)}
