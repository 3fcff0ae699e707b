--[[
  What a step records besides the state it changes: a task's history, the deployment's feed, the
  operator who caused it, a device's ended runs, and the deployment's counters.

  Functions (each takes the deployment, includes/deployment.lua, first):
    setActor(S, actor)                    name the operator on every event of this step
    publish(S, event)                     an event of no task, to the feed
    taskEvent(S, task, kind, now, ...)    an event of a task, to its history and the feed
    endRun(S, task, attempt, now, outcome) an attempt's run, to its device's runs
    count(S, name, by)                    add by (default 1) to a deployment-wide counter (`stats`)

  Invariants kept: every transition appends its event to the task's history (the record the
  caller saves in the same step) and to the feed in the same step, so neither can disagree with
  the state; the history keeps the last TASK_EVENTS_KEPT events, the feed about FEED_EVENTS_KEPT,
  a device's runs the last DEVICE_RUNS_KEPT, and a device's runs expire a retention after its
  last use.
]]
--- @include "includes/common"
--- @include "includes/deployment"

-- The operator on whose request a script runs (a token's name, or "admin"): every event of
-- that step names it as its `actor`, those of the transitions the request set off included
-- (a drain's `unassigned`, a create's `assigned`). A script an operator calls sets it from its
-- own ARGV before any event; the host protocol's and the reaper's scripts leave it nil.
local function setActor(S, actor)
  if actor ~= '' then
    S.actor = actor
  end
end

-- An event of no task (host_online, device_disabled, ...): to the feed only.
local function publish(S, event)
  publishTo(S.key.feed, event, S.actor)
end

-- A task's event: appended to its history, which its record carries (the last
-- TASK_EVENTS_KEPT), and to the feed. The caller saves the task afterwards: the history is part
-- of the record, so it costs no command of its own. `status` is the task's status after the
-- event, except for a `result`, where it is the reported one.
local function taskEvent(S, task, kind, now, reason, status)
  local event = {
    at = now,
    type = kind,
    attempt = task.attempt,
    host_id = task.host_id,
    device_id = task.device_id or task.target_device,
    reason = reason,
    status = status or task.status,
    actor = S.actor,
  }
  local history = task.events or {}
  history[#history + 1] = event
  if #history > TASK_EVENTS_KEPT then
    table.remove(history, 1)
  end
  task.events = history
  -- The feed's copy names the task, its team and its run (a watcher filters by any); the
  -- history, which lives in the task's own record, implies them.
  event.task_id, event.team, event.run_id = task.id, task.team, task.run_id
  rcall('XADD', S.key.feed, 'MAXLEN', '~', FEED_EVENTS_KEPT, '*', 'e', cjson.encode(event))
  event.task_id, event.team, event.run_id = nil, nil, nil
end

-- A device's runs, newest first, one entry per claimed attempt, written when the attempt ends
-- (the run in progress is the device's reserved running task: queries read it from there). The
-- list lives while the device is used within the retention window.
local function endRun(S, task, attempt, now, outcome)
  if not task.device_id then
    return
  end
  local runs = derived(S, 'device_runs', task.device_id)
  local run = cjson.encode({task_id = task.id, attempt = attempt, host_id = task.host_id,
                            started_at = task.started_at, ended_at = now, outcome = outcome})
  if rcall('LPUSH', runs, run) > DEVICE_RUNS_KEPT then
    rcall('LTRIM', runs, 0, DEVICE_RUNS_KEPT - 1)
  end
  rcall('PEXPIRE', runs, S.retentionMs)
end

-- Add `by` (1 when not given) to a deployment-wide counter; adding 0 writes nothing.
local function count(S, name, by)
  by = by or 1
  if by ~= 0 then
    rcall('HINCRBY', S.key.stats, name, by)
  end
end
