--[[
  Runs: many tasks as one (PROTOCOL.md, "Runs"). A run is its record in `runs` (JSON: id, seq,
  name, team, priority, status, created_at, ended_at, cancel_requested, created_by,
  creator_token, idempotency_key and request_hash, places, minted), its tasks one per place in
  `run_tasks:<run>` (task id -> place; a rerun takes the place of the task it replaces) and its
  counts in `run_counts:<run>` (coordinator/state/keys.py, run_counts). A task of a run carries
  `run_id`, `run_place`, `run_work` (its work item: a workflow's name or a goal's text),
  `run_label` (what the breakdown names its work item by, when that is not `run_work` itself:
  workLabel) and `run_device` (the device its counts stand under now).

  Functions (each takes the deployment, includes/deployment.lua, first, but runWork):
    runWork(task)                      a task's work item (kept on the task as `run_work`)
    workLabel(work)                    a work item's name in the breakdown: at most
                                       RUN_WORK_LABEL_MAX_BYTES bytes
    runCountsReply(S, runId)           the run's counts by task status, as HGETALL would answer
                                       them (the breakdown left out: GET /api/v1/runs/{id} reads it)
    ownedRun(S, runId, owner)          the run a caller acts on, or nil and the error reply (no
                                       such run; `owner` set and not the token that created it)
    steeredRun(S, args)                ownedRun for an operator's step on a run, its actor set
                                       first (every event of the step names them); the scripts
                                       that steer a run take the same leading ARGV[6..9]: run id,
                                       owner (the token id the run must have been created by, ""
                                       for any run), actor (the operator's name), actor id (its
                                       token's id, "admin" for the bootstrap token)
    countRunTask(S, task, previous)    a task of a run saved, `previous` its status before (nil:
                                       it joins the run): its counts move, and the run ends when
                                       its last open task ends (run_ended), or runs again when an
                                       ended run gains an open task
    uncountRunTask(S, task)            a task replaced by its rerun leaves its run's counts
    keepLastStep(S, task)              a run's task keeps its attempt's last progress as that
                                       attempt ends (the report names its last step)
    forgetRunTask(S, task)             retention deleted a run's task: the run goes with its last
    runKeepsUntil(S, task, now, retentionMs)  when retention may delete a task of a run that has
                                       not ended a retention ago (its deadline then), or nil

  Invariants kept: a run's counts are its current tasks' statuses (the latest rerun in each
  place), moved in the step that saves the task (placement's saveTask calls countRunTask), never
  recounted; `open` is how many of them have not ended, and the run is `running` exactly while
  it is above 0; `stored` is how many task records of the run exist, and the run's keys are
  deleted in the step that deletes its last task, which is never before a retention after the run
  ended (runKeepsUntil), so its counts, report and rerun-failed see every task it counts. The
  breakdown's fields are bounded whatever the work items: a work item is named by at most
  RUN_WORK_LABEL_MAX_BYTES bytes.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/idempotency"

local function ownedRun(S, runId, owner)
  local run = getJson(S.key.runs, runId)
  if not run then
    return nil, {E.NOT_FOUND}
  end
  if owner ~= '' and run.creator_token ~= owner then
    return nil, {E.NOT_OWNER}
  end
  return run
end

local function steeredRun(S, args)
  setActor(S, args[8], args[9])
  return ownedRun(S, args[6], args[7])
end

local function runWork(task)
  if task.run_work then
    return task.run_work
  end
  if task.kind == 'workflow' then
    return cjson.decode(task.workflow).name
  end
  return task.goal
end

-- A work item as the breakdown names it: its text when that is short enough, else its start (cut
-- between two UTF-8 characters), an ellipsis and the first 8 hex digits of the text's SHA-1, so
-- two long work items that start alike stay apart. At most RUN_WORK_LABEL_MAX_BYTES bytes.
local WORK_LABEL_TAIL = 12  -- the ellipsis (3 bytes), a space and 8 hex digits
local function workLabel(work)
  if #work <= RUN_WORK_LABEL_MAX_BYTES then
    return work
  end
  local cut = RUN_WORK_LABEL_MAX_BYTES - WORK_LABEL_TAIL
  local byte = string.byte(work, cut + 1)
  while cut > 0 and byte >= 0x80 and byte < 0xC0 do  -- a continuation byte: not a character's start
    cut = cut - 1
    byte = string.byte(work, cut + 1)
  end
  return string.sub(work, 1, cut) .. '\226\128\166 ' .. string.sub(redis.sha1hex(work), 1, 8)
end

-- The label a task's work item is counted under. A task joining its run takes workLabel's (kept
-- on the task when it is not the text itself); one counted before labels were bounded keeps its
-- full text, which its fields hold.
local function labelOf(task, work, joining)
  if task.run_label then
    return task.run_label
  end
  local label = joining and workLabel(work) or work
  if label ~= work then
    task.run_label = label
  end
  return label
end

local function runCountsReply(S, runId)
  local statuses = {}
  for status in pairs(STATUS_CODES) do
    statuses[#statuses + 1] = status
  end
  local values = rcall('HMGET', derived(S, 'run_counts', runId), unpack(statuses))
  local reply = {}
  for i, status in ipairs(statuses) do
    reply[#reply + 1] = status
    reply[#reply + 1] = values[i] or '0'
  end
  return reply
end

-- The device a task's counts stand under: where it runs or ran, else the one it is aimed at,
-- else '' (a selector's task not placed yet).
local function runDeviceOf(task)
  return task.device_id or task.target_device or ''
end

-- Add `by` to one field of a run's breakdown, dropping a field that falls to 0.
local function countBreakdown(countsKey, field, by)
  if rcall('HINCRBY', countsKey, field, by) == 0 then
    rcall('HDEL', countsKey, field)
  end
end

-- The run's record written back.
local function saveRun(S, run)
  rcall('HSET', S.key.runs, run.id, cjson.encode(run))
end

-- A run whose last open task ended: succeeded if every task did, else cancelled if it was
-- cancelled, else failed; `run_ended` to the feed.
local function closeRun(S, runId, countsKey)
  local run = getJson(S.key.runs, runId)
  if not run or run.status ~= 'running' then
    return
  end
  local ended = rcall('HMGET', countsKey, 'failed', 'cancelled')
  local now = nowMs()
  if (tonumber(ended[1]) or 0) == 0 and (tonumber(ended[2]) or 0) == 0 then
    run.status = 'succeeded'
  elseif run.cancel_requested then
    run.status = 'cancelled'
  else
    run.status = 'failed'
  end
  run.ended_at = now
  saveRun(S, run)
  count(S, 'runs_running', -1)
  count(S, 'runs_' .. run.status)
  publish(S, {type = 'run_ended', run_id = runId, name = run.name, team = run.team, status = run.status,
              at = now})
end

-- An ended run that gains an open task (a rerun) is running again.
local function reopenRun(S, runId)
  local run = getJson(S.key.runs, runId)
  if not run or run.status == 'running' then
    return
  end
  count(S, 'runs_' .. run.status, -1)
  count(S, 'runs_running')
  run.status = 'running'
  run.ended_at = nil
  saveRun(S, run)
end

-- Move a task of a run from status `from` to `to` in its run's counts (nil: not counted).
local function moveRunCounts(S, task, from, to)
  local countsKey = derived(S, 'run_counts', task.run_id)
  local work = runWork(task)
  task.run_work = work
  local label = labelOf(task, work, from == nil)
  if from then
    rcall('HINCRBY', countsKey, from, -1)
    countBreakdown(countsKey, indexMember('d', task.run_device or '', from), -1)
    countBreakdown(countsKey, indexMember('w', label, from), -1)
  elseif to then
    rcall('HINCRBY', countsKey, 'stored', 1)  -- a task joins the run
  end
  if to then
    task.run_device = runDeviceOf(task)
    rcall('HINCRBY', countsKey, to, 1)
    rcall('HINCRBY', countsKey, indexMember('d', task.run_device, to), 1)
    rcall('HINCRBY', countsKey, indexMember('w', label, to), 1)
  end
  local wasOpen = from ~= nil and not TERMINAL_STATUSES[from]
  local isOpen = to ~= nil and not TERMINAL_STATUSES[to]
  if wasOpen ~= isOpen then
    local open = rcall('HINCRBY', countsKey, 'open', isOpen and 1 or -1)
    if open == 0 then
      closeRun(S, task.run_id, countsKey)
    elseif isOpen and open == 1 then
      reopenRun(S, task.run_id)
    end
  end
end

local function countRunTask(S, task, previous)
  if previous == task.status and runDeviceOf(task) == task.run_device then
    return
  end
  moveRunCounts(S, task, previous, task.status)
end

local function uncountRunTask(S, task)
  moveRunCounts(S, task, task.status, nil)
end

local function keepLastStep(S, task)
  if task.run_id then
    local raw = rcall('HGET', S.key.progress, task.id)
    if raw then
      task.last_step = cjson.decode(raw)
    end
  end
end

local function forgetRunTask(S, task)
  if not task.run_id then
    return
  end
  local countsKey = derived(S, 'run_counts', task.run_id)
  local tasksKey = derived(S, 'run_tasks', task.run_id)
  rcall('ZREM', tasksKey, task.id)
  if rcall('HINCRBY', countsKey, 'stored', -1) > 0 then
    return
  end
  local run = getJson(S.key.runs, task.run_id)
  rcall('DEL', countsKey, tasksKey)
  rcall('HDEL', S.key.runs, task.run_id)
  rcall('ZREM', S.key.runs_by_age, task.run_id)
  if run then
    if run.idempotency_key then
      forgetIdempotent(S.key.run_idempotency, run)
    end
    count(S, 'runs_' .. run.status, -1)
  end
end

-- A task of a run is kept until a retention after its run ended, whenever it ended itself: while
-- the run is running it is looked at again a retention from now (by then the run ended, and its
-- deadline is set from the end, exactly; or it still runs), after that a retention from the end.
local function runKeepsUntil(S, task, now, retentionMs)
  if not task.run_id then
    return nil
  end
  local run = getJson(S.key.runs, task.run_id)
  if not run then
    return nil
  end
  if run.status == 'running' then
    return now + retentionMs
  end
  local due = (run.ended_at or 0) + retentionMs
  return due > now and due or nil
end
