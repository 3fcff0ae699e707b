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
                driver, labels (JSON text)}, one task per work item for each pooled, enabled
                device of `driver` whose labels match, pinned to it
    ARGV[9]     at most this many tasks
    ARGV[10]    actor: the operator's name, on every event of this step
    ARGV[11]    actor id: its token's id ("admin" for the bootstrap token), on the same events
  Keys it touches besides those of its includes:
    runs, runs_by_age, run_seq, run_idempotency, run_tasks:<run>, run_counts:<run>
    teams, team_names   its team named by its tasks (includes/teams.lua, nameTeam)
    devices_by_driver, devices, disabled_devices   (a matrix's devices)
  Output:
    {0, run JSON, 1, counts}  created; counts: its counts by task status (runCountsReply)
    {0, run JSON, 0, counts}  an earlier run with the same idempotency key and the same request,
                              from the same token (includes/idempotency.lua: a key is its token's)
    {IDEMPOTENCY_CONFLICT, run id}  same token and idempotency key, different request; nothing
                              created
    {NO_MATCHING_DEVICE}      a matrix whose selector matches no pooled, enabled device
    {TOO_MANY_TASKS, n}       a matrix of more than ARGV[9] tasks (n, or more); nothing created

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
--- @include "includes/idempotency"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[10], ARGV[11])

local run = cjson.decode(ARGV[6])
local maxTasks = tonumber(ARGV[9])

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

-- The pooled, enabled devices of `driver` whose labels match, in id order; more than `most`
-- answers early (the caller refuses so many).
local function matchingDevices(driver, labels, most)
  local low, high = prefixRange(driver)
  local matched = {}
  local offset = 0
  while true do
    local members = rcall('ZRANGEBYLEX', S.key.devices_by_driver, low, high, 'LIMIT', offset, 500)
    for _, member in ipairs(members) do
      local deviceId = splitMember(member)[2]
      local device = getJson(S.key.devices, deviceId)
      if device and labelsMatch(labels, device.labels)
          and rcall('HEXISTS', S.key.disabled_devices, deviceId) == 0 then
        matched[#matched + 1] = deviceId
        if #matched > most then
          return matched
        end
      end
    end
    if #members < 500 then
      return matched
    end
    offset = offset + 500
  end
end

local specs = cjson.decode(ARGV[7])
if ARGV[8] ~= '' then
  local matrix = cjson.decode(ARGV[8])
  local devices = matchingDevices(matrix.driver, matrix.labels, math.floor(maxTasks / #matrix.work))
  if #devices == 0 then
    return {E.NO_MATCHING_DEVICE}
  end
  if #devices * #matrix.work > maxTasks then
    return {E.TOO_MANY_TASKS, #devices * #matrix.work}
  end
  for _, work in ipairs(matrix.work) do
    for _, deviceId in ipairs(devices) do
      local spec = {}
      for field, value in pairs(work) do
        spec[field] = value
      end
      spec.target_device = deviceId
      specs[#specs + 1] = spec
    end
  end
end

local now = nowMs()
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
