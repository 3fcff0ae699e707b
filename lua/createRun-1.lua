--[[
  Create a run (PROTOCOL.md, "Runs"): its record and all of its tasks in one step, or nothing.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     run JSON built by the service: id (`r_<hex>`; its tasks are `t_<hex>-<n>`), name,
                team, priority, created_by, creator_token (absent for the bootstrap admin),
                idempotency_key? with its request_hash
    ARGV[7]     its tasks: a JSON list of task specs as createTask's (kind, goal | workflow,
                max_steps, max_attempts, queue_timeout_ms, target_device | (driver, labels)),
                without id, team or priority (the run's apply); "[]" for a matrix
    ARGV[8]     a matrix, or "" for a list of tasks: JSON {work: [task specs without a target],
                driver, labels (JSON text)}, one task per work item for each pooled device of
                `driver` whose labels match and that could run that work item now, pinned to it
    ARGV[9]     at most this many tasks
    ARGV[10]    actor: the operator's name, on every event of this step
    ARGV[11]    actor id: its token's id ("admin" for the bootstrap token), on the same events
    ARGV[12]    at most this many of a matrix's left-out devices are listed (wire.RUN_EXCLUDED_LISTED)
  Keys it touches besides those of its includes:
    runs, runs_by_age, run_seq, run_idempotency, run_tasks:<run>, run_counts:<run>
    teams, team_names   its team named by its tasks (includes/teams.lua, nameTeam)
    devices_by_driver, devices, disabled_devices, host_state:<host>   (a matrix's devices)
  Output:
    {0, run JSON, 1, counts}  created; counts: its counts by task status (runCountsReply). A
                              matrix's run JSON holds `excluded` (the matching devices left out,
                              the first ARGV[12] in id order: {device_id, reason, work?}) and
                              `excluded_count` (all of them), when any was left out
    {0, run JSON, 0, counts}  an earlier run with the same idempotency key and the same request,
                              from the same token (includes/idempotency.lua: a key is its token's)
    {IDEMPOTENCY_CONFLICT, run id}  same token and idempotency key, different request; nothing
                              created
    {NO_MATCHING_DEVICE, excluded JSON}  a matrix with no device that could run any of its work
                              now: none matches (excluded "[]"), or every one is left out
    {TOO_MANY_TASKS, n}       a matrix of more than ARGV[9] tasks (n, or more); nothing created

  What a matrix takes (PROTOCOL.md, "Runs"): a device that could run the work item now, that is
  one includes/candidates.lua's notFreeBecause finds free but for being busy (reserved, or
  reported busy: its task waits for it, as any pinned task does). The reasons a matching device
  is left out are that function's, in its order: host_offline, disabled, host_draining,
  unavailable, host_stalled, and no_workflow (with the work item's workflow) for each work item
  its host does not list. Cost: every pooled device of the driver is read (its record, its
  disabled flag, and its host's state once per host), in pages of 500, stopping once the tasks
  would pass ARGV[9]; the same as the matching it replaced.

  Invariants: a run and every one of its tasks are stored, indexed and placed (assigned or
  waiting) in one step, each task as createTask stores one, so no observer sees part of a run;
  its counts start from its tasks as they were placed; `run_created` is in the feed.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/pool"
--- @include "includes/placement"
--- @include "includes/tasks"
--- @include "includes/runs"
--- @include "includes/candidates"
--- @include "includes/idempotency"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[10], ARGV[11])

local run = cjson.decode(ARGV[6])
local maxTasks = tonumber(ARGV[9])
local excludedListed = tonumber(ARGV[12])

local function answer(created)
  local stored = getJson(S.key.runs, run.id)
  return {0, cjson.encode(stored), created, runCountsReply(S, run.id)}
end

if run.idempotency_key then
  local existing = findIdempotent(S.key.run_idempotency, S.key.runs, run)
  if existing then
    if existing.request_hash ~= run.request_hash then
      return {E.IDEMPOTENCY_CONFLICT, existing.id}
    end
    run = existing
    return answer(0)
  end
end

-- Why a device matching the selector could not run work now, whatever the work item (nil if it
-- could): notFreeBecause's reasons, less busy and less the host's workflows (asked per work item).
local function leftOutBecause(standing, device, disabled)
  local status = device.status == 'busy' and 'available' or device.status
  return notFreeBecause({online = standing.online, runs = true, draining = standing.draining,
                         stalled = standing.stalled}, {status = status}, false, disabled)
end

-- The matrix over the devices of its selector: for each work item (by index) the device ids
-- that could run it now, in id order; how many tasks that makes; the devices left out, each with
-- its reason (the first `excludedListed`), and how many. Past `maxTasks` tasks it answers early.
local function expandMatrix(matrix, now)
  local low, high = prefixRange(matrix.driver)
  local taken, made, excluded, excludedCount = {}, 0, {}, 0
  for index = 1, #matrix.work do
    taken[index] = {}
  end
  local function leaveOut(deviceId, reason, work)
    excludedCount = excludedCount + 1
    if #excluded < excludedListed then
      excluded[#excluded + 1] = {device_id = deviceId, reason = reason, work = work}
    end
  end
  local hosts = {}
  local offset = 0
  while true do
    local members = rcall('ZRANGEBYLEX', S.key.devices_by_driver, low, high, 'LIMIT', offset, 500)
    for _, member in ipairs(members) do
      local deviceId = splitMember(member)[2]
      local device = getJson(S.key.devices, deviceId)
      if device and labelsMatch(matrix.labels, device.labels) then
        local standing = hosts[device.host_id]
        if not standing then
          standing = hostState(S, device.host_id, now)
          hosts[device.host_id] = standing
        end
        local reason = leftOutBecause(standing, device, rcall('HEXISTS', S.key.disabled_devices, deviceId) == 1)
        if reason then
          leaveOut(deviceId, reason, nil)
        else
          for index, work in ipairs(matrix.work) do
            if runsTask(standing.workflows, work) then
              taken[index][#taken[index] + 1] = deviceId
              made = made + 1
            else
              leaveOut(deviceId, 'no_workflow', workflowOf(work))
            end
          end
          if made > maxTasks then
            return taken, made, excluded, excludedCount
          end
        end
      end
    end
    if #members < 500 then
      return taken, made, excluded, excludedCount
    end
    offset = offset + 500
  end
end

local now = nowMs()
local specs = cjson.decode(ARGV[7])
if ARGV[8] ~= '' then
  local matrix = cjson.decode(ARGV[8])
  local taken, made, excluded, excludedCount = expandMatrix(matrix, now)
  if made == 0 then
    return {E.NO_MATCHING_DEVICE, #excluded > 0 and cjson.encode(excluded) or '[]'}
  end
  if made > maxTasks then
    return {E.TOO_MANY_TASKS, made}
  end
  for index, work in ipairs(matrix.work) do
    for _, deviceId in ipairs(taken[index]) do
      local spec = {}
      for field, value in pairs(work) do
        spec[field] = value
      end
      spec.target_device = deviceId
      specs[#specs + 1] = spec
    end
  end
  if excludedCount > 0 then
    run.excluded = excluded
    run.excluded_count = excludedCount
  end
end

if run.idempotency_key then
  rcall('HSET', S.key.run_idempotency, idempotencyField(run), run.id)
end
run.seq = rcall('INCR', S.key.run_seq)
run.status = 'running'
run.created_at = now
run.places = #specs
run.minted = #specs
-- Stored before its tasks: their counts reach the run as each is saved.
saveRun(S, run)
rcall('ZADD', S.key.runs_by_age, run.seq, run.id)
count(S, 'runs_running')
nameTeam(S, teamOf(run), 'tasks', #specs)  -- its team is listed while its tasks are kept
publish(S, {type = 'run_created', run_id = run.id, name = run.name, team = run.team, tasks = #specs, at = now})

local taskPrefix = 't_' .. string.sub(run.id, 3) .. '-'
local runTasks = derived(S, 'run_tasks', run.id)
for place, task in ipairs(specs) do
  task.id = taskPrefix .. place
  task.run_id = run.id
  task.run_place = place - 1
  task.team = run.team
  task.priority = run.priority
  task.created_by = run.created_by
  task.creator_token = run.creator_token
  rcall('ZADD', runTasks, place - 1, task.id)
  startTask(S, task, now)
end
return answer(1)
