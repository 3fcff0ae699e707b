--[[
  Rerun a run's failed tasks: one new task, in the same run and place, for each of its tasks that
  ended `failed`; the new task's `rerun_of` names the one it replaces, whose `replaced_by` names
  it. From then on the run's status, counts and report take the rerun in its place.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..9]  the run the operator steers and who: run id, owner, actor, actor id (includes/runs.lua,
                steeredRun)
  Keys it touches besides those of its includes: runs, run_tasks:<run>, run_counts:<run>,
  teams and team_names (each rerun is one more task record of its team)
  Output:
    {0, number of tasks created, run JSON, counts}  counts: its counts by task status (runCountsReply)
    {NOT_FOUND}
    {NOT_OWNER}  an owner was given and the run was not created by it; nothing changed

  Invariants: each failed task of the run is replaced once (a replaced task is no longer in
  run_tasks, so a second call finds nothing to rerun); a replaced task leaves the run's counts in
  the step its rerun joins them; the run is `running` again once it holds an open task, and its
  cancel is forgotten (a rerun is asked for anew).
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
local runId = run.id
local runTasks = derived(S, 'run_tasks', runId)
local failed = {}
for _, taskId in ipairs(rcall('ZRANGE', runTasks, 0, -1)) do
  local task = getJson(S.key.tasks, taskId)
  if task and task.status == 'failed' then
    failed[#failed + 1] = task
  end
end
-- What a rerun copies of the task it replaces: its spec, its run and its creator.
local COPIED = {'kind', 'goal', 'workflow', 'max_steps', 'max_attempts', 'queue_timeout_ms', 'target_device',
                'driver', 'labels', 'team', 'priority', 'created_by', 'creator_token', 'run_id', 'run_place'}
if #failed > 0 then
  local first = run.minted + 1
  run.minted = run.minted + #failed
  run.cancel_requested = nil
  -- Saved before the reruns: the first of them reopens the run, which reads the record.
  saveRun(S, run)
  local now = nowMs()
  local taskPrefix = 't_' .. string.sub(runId, 3) .. '-'
  for i, old in ipairs(failed) do
    local rerun = {id = taskPrefix .. (first + i - 1), rerun_of = old.id}
    for _, field in ipairs(COPIED) do
      rerun[field] = old[field]
    end
    uncountRunTask(S, old)
    old.replaced_by = rerun.id
    saveTask(S, old, old.status)
    rcall('ZREM', runTasks, old.id)
    rcall('ZADD', runTasks, old.run_place, rerun.id)
    nameTeam(S, teamOf(rerun), 'tasks', 1)
    startTask(S, rerun, now)
  end
end
return {0, #failed, cjson.encode(getJson(S.key.runs, runId)), runCountsReply(S, runId)}
