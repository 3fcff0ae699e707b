--[[
  Placement: the one place that decides which device runs which task.

  What a queued task asks of a device is its target: the device it is aimed at, or its driver and
  labels; and its workflow, if any. Targets are interned (`targets`: id -> what it asks,
  `target_ids`: its spec -> id) while a task waits for them. A queued task waits in its target's
  queue for its team, `waiting:<target>|<team>`, highest priority first, then oldest; the teams
  waiting for a target are `target_teams:<target>` and the targets a team waits for
  `team_targets:<team>`, each a zset scored by the queue's first task. Every task of one queue
  asks the same of a device, so its first is the one any device that fits takes: placement
  compares heads and never walks a queue.

  Two questions, each answered through an index, never by reading the backlog or the idle pool:
    - a new task (or a team back under its quota): which free device fits? The free index
      (includes/pool.lua: `free_devices:<driver>`, `free_label:<driver>|<name>=<value>`, scored
      by when each device became free) intersected over its labels, idle longest first, its host
      checked on the candidates (findDeviceFor);
    - a device just freed: which waiting task? The targets it could fit are found by its own id
      (`device_targets:<device>`), its driver (`driver_targets:<driver>`: no label asked) and each
      of its labels (`label_targets:<driver>|<name>=<value>`: a target is indexed by one label,
      the one the fewest pooled devices had as it was interned, so few freed devices read it in
      vain); of those it fits, the teams' heads are ranked (pickByShare).
  A device takes, of the tasks it may run, one of the highest priority; of the teams with such a
  task, not at their quota, the one holding the fewest devices for its weight (running / weight;
  ties: the oldest task); that team's oldest (PROTOCOL.md, "Sharing the fleet"). A new task takes
  the free device idle longest when its team is not at its quota: a free device has no waiting
  task it may run, but those of teams at their quota.

  Functions (each takes the deployment, includes/deployment.lua, first):
    saveTask(S, task, previousStatus)        write a task back, moving it in `tasks_by_status` and
                                             in its run's counts
    queueScore(task)                         a queued task's order in its queue
    enqueueTask(S, task)                     put a queued task in its queue, with its deadline
    assignTask(S, task, deviceId, device, now)  reserve the device, queue the assignment for its
                                             host, give it a claim deadline, wake the host's polls
                                             (or keep it for the step's eager dispatch)
    saveAssigned(S, task)                    save a task just assigned from its queue
    findDeviceFor(S, task, now)              a free device the task may run on, taken from the
                                             free index
    placeTask(S, task, now)                  assign a queued task now, or let it wait
    unqueueTask(S, task)                     take a queued task out of its queue
    feedDevice(S, deviceId, device, now, workflows)  a device just free takes the task the order
                                             picks (`workflows`: its host's, hostState)
    placeTeamWork(S, team, now, offset)      a team below its quota again: its waiting tasks take
                                             free devices, in order, a bounded slice per step
    refreshDevice(S, deviceId, now, ...)     recompute a device's membership of the free index,
                                             feeding at most S.feedsLeft devices a step
    refreshWaitingDevices(S, now, limit)     the reaper: the devices a step left past its bound

  Cost, each bounded by what one step touches, never by the backlog or the idle pool: a create
  O(selector labels) commands and one intersection (C time of its smallest set), plus a read per
  free candidate passed over (host offline or not listing the workflow), and one ZCARD a label
  when its target is new; a freed device one EXISTS when nothing waits for it, else O(its labels
  + targets indexed under them + teams waiting for those it fits), where a target is under one of
  its labels, the rarest in the pool as it was interned (16 targets a device in bench row 14's
  fleet, where the first label in name order put 50); a team back under its quota at most
  TEAM_TARGETS_PER_STEP targets, the rest in the reaper's next pass (placeLeftOver).

  Invariants kept:
    - a device is free (in the free index) only if it is pooled, `available`, unreserved, not
      disabled, and its host online, not draining and not stalled;
    - a free device has no matching waiting task its host may run, but those of teams at their
      quota (each time a device becomes free, or its labels, driver, host, or host's workflows
      change, it takes one; each time a team drops below its quota, its waiting tasks take free
      devices), so a new task never jumps the queue by taking a free device. (A team whose
      placement ran past its step's bound is in `placing_teams` until the reaper finishes it, and
      a device past a step's bound of feeds is in `refresh_devices`, not free, until the reaper
      feeds it.)
    - a team's running and queued counts (includes/teams.lua) change with each reservation and
      each queue entry, in the same step; a run's counts (includes/runs.lua) with each status
      its tasks take, in the step that saves them;
    - a task is in exactly one of: a waiting queue (queued, its record naming the queue's target
      as `target_id`), its host's `assigned` list (assigned), a lease (running), or `retention`
      (terminal); an assigned task has a claim deadline, and its device's reservation names it;
    - a target is interned exactly while a team waits for it, and indexed once;
    - an assignment wakes every poll of its host registered before it (includes/wakeups.lua).
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/pool"
--- @include "includes/wakeups"
--- @include "includes/teams"
--- @include "includes/runs"

-- Write a task back, moving it in the status index when its status changed, and in its run's
-- counts (includes/runs.lua) when it belongs to one; its JSON.
local function saveTask(S, task, previousStatus)
  if previousStatus ~= task.status then
    rcall('ZADD', S.key.tasks_by_status, statusScore(task.status, task.seq), task.id)
  end
  if task.run_id then
    countRunTask(S, task, previousStatus)
  end
  local encoded = cjson.encode(task)
  rcall('HSET', S.key.tasks, task.id, encoded)
  return encoded
end

-- A queued task's score in its queue: higher priority first (priorities are PRIORITY_MIN..
-- PRIORITY_MAX), then older (seq < 2^44, so every score is an exact double).
local PRIORITY_SPAN = 2^44
local function queueScore(task)
  return string.format('%.0f', (PRIORITY_MAX - (task.priority or 0)) * PRIORITY_SPAN + task.seq)
end

-- What a task asks of a device, as one string: the device it is aimed at, or its driver and its
-- labels (canonical JSON, so equal selectors are equal strings); and its workflow's name.
local function targetSpec(task)
  if task.target_device then
    return indexMember('d', task.target_device, workflowOf(task) or '')
  end
  return indexMember('p', task.driver, task.labels or '{}', workflowOf(task) or '')
end

-- The index a freed device finds a target in: its device's, its driver's (no label asked), or its
-- driver's by the one label it was indexed by as it was interned (`indexed`, internTarget; a
-- target interned before that choice existed: its first label in name order).
local function targetIndexKey(S, target)
  if target.target_device then
    return derived(S, 'device_targets', target.target_device)
  end
  if target.indexed then
    return derived(S, 'label_targets', target.indexed)
  end
  local labels = cjson.decode(target.labels or '{}')
  local first
  for name in pairs(labels) do
    if first == nil or name < first then
      first = name
    end
  end
  if first == nil then
    return derived(S, 'driver_targets', target.driver)
  end
  return derived(S, 'label_targets', labelIndex(target.driver, first, labels[first]))
end

-- Of a selector's labels (a decoded table, not empty), the index of the one the fewest pooled
-- devices have (`pooled_label`; ties: name order): a target indexed there is read by the fewest
-- freed devices that then find one of its other labels missing. One ZCARD a label.
local function rarestLabelIndex(S, driver, labels)
  local names = {}
  for name in pairs(labels) do
    names[#names + 1] = name
  end
  table.sort(names)
  local best, bestCount
  for _, name in ipairs(names) do
    local index = labelIndex(driver, name, labels[name])
    local pooled = rcall('ZCARD', derived(S, 'pooled_label', index))
    if not bestCount or pooled < bestCount then
      best, bestCount = index, pooled
    end
  end
  return best
end

-- The id of the target a queued task waits for, interned on first use: `targets` holds what it
-- asks (target_device, or driver and labels; workflow) and the label it is indexed by
-- (`indexed`), `target_ids` its spec -> id, and the target is put in the index a freed device
-- reads (targetIndexKey).
local function internTarget(S, task)
  local spec = targetSpec(task)
  local id = rcall('HGET', S.key.target_ids, spec)
  if id then
    return id
  end
  id = 't' .. rcall('INCR', S.key.target_seq)
  local target = {target_device = task.target_device, workflow = workflowOf(task), spec = spec}
  if not task.target_device then
    target.driver, target.labels = task.driver, task.labels or '{}'
    local labels = cjson.decode(target.labels)
    if next(labels) ~= nil then
      target.indexed = rarestLabelIndex(S, target.driver, labels)
    end
  end
  rcall('HSET', S.key.target_ids, spec, id)
  putJson(S.key.targets, id, target)
  rcall('SADD', targetIndexKey(S, target), id)
  return id
end

-- A target no team waits for any more leaves the indexes.
local function forgetTarget(S, targetId)
  local target = getJson(S.key.targets, targetId)
  rcall('HDEL', S.key.targets, targetId)
  if target then
    rcall('HDEL', S.key.target_ids, target.spec)
    rcall('SREM', targetIndexKey(S, target), targetId)
  end
end

-- The queue of one target for one team.
local function targetQueueKey(S, targetId, team)
  return derived(S, 'waiting', targetId .. '|' .. team)
end

-- Put a queued task in its queue, and give it its queue deadline (the caller saves the task).
local function enqueueTask(S, task)
  local team = teamOf(task)
  local target = internTarget(S, task)
  task.target_id = target
  local score = queueScore(task)
  if rcall('ZADD', targetQueueKey(S, target, team), score, task.id) == 1 then
    countQueued(S, team, 1)
  end
  -- the team's head in each index: its first task in order
  rcall('ZADD', derived(S, 'target_teams', target), 'LT', score, team)
  rcall('ZADD', derived(S, 'team_targets', team), 'LT', score, target)
  if task.queue_deadline then  -- a task created without a queue timeout (the store takes it as optional) has none
    rcall('ZADD', S.key.queue_deadlines, task.queue_deadline, task.id)
  end
end

-- Give a task a device that is not in the free index (taken from it, or just released); the caller
-- saves the task (saveAssigned). The device a result's eager dispatch asked for (`S.eagerDevice`,
-- still of the reporting host `S.eagerHost`; recordResult-1.lua) is not queued for a claim: its
-- task is kept as `S.eagerTask`, for that script to dispatch in this same step
-- (includes/dispatch.lua), and saved there.
local function assignTask(S, task, deviceId, device, now)
  rcall('HSET', S.key.reservations, deviceId, task.id)
  countHeld(S, teamOf(task), 1)
  task.status = 'assigned'
  task.device_id = deviceId
  task.host_id = device.host_id
  task.updated_at = now
  taskEvent(S, task, 'assigned', now)
  if S.eagerDevice == deviceId and S.eagerHost == device.host_id then
    S.eagerTask = task
    return
  end
  rcall('RPUSH', derived(S, 'assigned', device.host_id), task.id)
  rcall('ZADD', S.key.claim_deadlines, now + S.claimTimeoutMs, task.id)
  wakePolls(S, device.host_id, now)
end

-- Save a task placement just assigned from its queue, unless a result's eager dispatch takes it
-- in this step: that saves it once, running.
local function saveAssigned(S, task)
  if S.eagerTask ~= task then
    saveTask(S, task, 'queued')
  end
end

-- A free device the task may run on, taken out of the free index, or nil: of those its target
-- names (its device; or the intersection of its driver's free set with each of its labels'), the
-- one idle longest whose host is online (one gone offline is skipped until the reaper sweeps it)
-- and may run it (a workflow task: one that lists its workflow, or lists none). Each host is read
-- once. Cost: O(selector labels) commands, the intersection's own (its smallest set), and one
-- read per candidate passed over (of a host offline or not listing the workflow).
local function findDeviceFor(S, task, now)
  if task.target_device then
    local device = getJson(S.key.devices, task.target_device)
    if not device then
      return nil
    end
    local host = hostState(S, device.host_id, now)
    if runsTask(host.workflows, task) and takeFree(S, task.target_device, device, host) then
      return task.target_device, device
    end
    return nil
  end
  local keys = freeKeys(S, task.driver, cjson.decode(task.labels or '{}'))
  local source = keys[1]
  if #keys > 1 then
    -- Every set there, or no device has them all; then one intersection, idle-since kept.
    if rcall('EXISTS', unpack(keys)) < #keys then
      return nil
    end
    local args = {'ZINTERSTORE', S.key.placement_scratch, #keys}
    for _, key in ipairs(keys) do
      args[#args + 1] = key
    end
    args[#args + 1] = 'AGGREGATE'
    args[#args + 1] = 'MAX'
    if rcall(unpack(args)) == 0 then
      return nil
    end
    source = S.key.placement_scratch
  end
  local workflow = workflowOf(task)
  local hostRuns = {}  -- host id -> whether it is online and may run the task
  local foundId, found
  local offset = 0
  while not foundId do
    local ids = rcall('ZRANGE', source, offset, offset + 31)
    for _, deviceId in ipairs(ids) do
      local device = getJson(S.key.devices, deviceId)
      if device then
        local runs = hostRuns[device.host_id]
        if runs == nil then
          local host = hostState(S, device.host_id, now)
          runs = host.online and runsWorkflow(host.workflows, workflow)
          hostRuns[device.host_id] = runs
        end
        if runs then
          foundId, found = deviceId, device
          break
        end
      end
    end
    if #ids < 32 then
      break
    end
    offset = offset + 32
  end
  if source ~= keys[1] then
    rcall('DEL', source)
  end
  if foundId then
    removeFree(S, foundId, found)
  end
  return foundId, found
end

-- Put a queued task on a free device now, unless its team holds its quota, or in its queue with
-- its queue deadline (the caller saves the task).
local function placeTask(S, task, now)
  local team = teamOf(task)
  local standing = standingsOf(S, {team})[team]
  local deviceId, device
  if not atQuota(standing) then
    deviceId, device = findDeviceFor(S, task, now)
  end
  if deviceId then
    assignTask(S, task, deviceId, device, now)
  else
    enqueueTask(S, task)
  end
end

-- Take a queued task off its queue (and its team off the target's and the target off the team's
-- once none of its tasks waits there; the target itself once no team waits for it).
local function unqueueTask(S, task)
  local team, target = teamOf(task), task.target_id
  task.target_id = nil
  rcall('ZREM', S.key.queue_deadlines, task.id)
  if not target then
    return
  end
  local queueKey = targetQueueKey(S, target, team)
  if rcall('ZREM', queueKey, task.id) == 1 then
    countQueued(S, team, -1)
    local teamsKey = derived(S, 'target_teams', target)
    local head = rcall('ZRANGE', queueKey, 0, 0, 'WITHSCORES')
    if #head == 0 then
      rcall('ZREM', derived(S, 'team_targets', team), target)
      rcall('ZREM', teamsKey, team)
      if rcall('EXISTS', teamsKey) == 0 then
        forgetTarget(S, target)
      end
    else
      -- its head now (the same when another task left)
      rcall('ZADD', teamsKey, head[2], team)
      rcall('ZADD', derived(S, 'team_targets', team), head[2], target)
    end
  end
end

-- Whether every label `wanted` asks for is one of `have` (both decoded tables).
local function labelsWithin(wanted, have)
  for name, value in pairs(wanted) do
    if have[name] ~= value then
      return false
    end
  end
  return true
end

-- The waiting task a device that just became free takes (PROTOCOL.md, "Sharing the fleet"): of
-- the targets it fits (aimed at it, or of its driver with labels it has) whose workflow its host
-- may run (`workflows`, hostState's), the highest priority; of the teams with one of it, not at
-- their quota, the fewest devices held for their weight; then the oldest. Every task of a
-- target's queue asks the same of a device, so each team's first task there is the one it would
-- take: heads are compared, no queue is walked. Nil when none fits, or every team with one is at
-- its quota. The targets are found through the device's own index, its driver's, and its labels'
-- (a target is indexed by one of its labels, internTarget), so a target is read only if the device
-- has the label it is indexed by.
-- Cost: one EXISTS (the common case when nothing waits for it: the end), else O(device labels +
-- targets in those indexes + teams waiting for the targets it fits) commands and decodes. Also
-- answers whether it looked further than that EXISTS (what a step's bound of feeds counts).
local function waitingIndexes(S, deviceId, device)
  local labels = cjson.decode(device.labels or '{}')
  local keys = {derived(S, 'device_targets', deviceId), derived(S, 'driver_targets', device.driver)}
  for name, value in pairs(labels) do
    keys[#keys + 1] = derived(S, 'label_targets', labelIndex(device.driver, name, value))
  end
  return keys, labels
end

-- Whether any target waits that the device might fit: one EXISTS of its indexes.
local function anyWaitsFor(S, deviceId, device)
  return rcall('EXISTS', unpack((waitingIndexes(S, deviceId, device)))) > 0
end

local function pickByShare(S, deviceId, device, workflows)
  local keys, labels = waitingIndexes(S, deviceId, device)
  if rcall('EXISTS', unpack(keys)) == 0 then
    return nil
  end
  local ids = {}
  for _, key in ipairs(keys) do
    for _, id in ipairs(rcall('SMEMBERS', key)) do
      ids[#ids + 1] = id
    end
  end
  if #ids == 0 then
    return nil, true
  end
  local heads = {}  -- {team, target, score} of each team waiting for a target the device fits
  local teams, named = {}, {}
  for i, raw in ipairs(rcall('HMGET', S.key.targets, unpack(ids))) do
    local target = raw and cjson.decode(raw)
    if target and runsWorkflow(workflows, target.workflow)
        and (target.target_device == deviceId or (not target.target_device
          and labelsWithin(cjson.decode(target.labels), labels))) then
      local entries = rcall('ZRANGE', derived(S, 'target_teams', ids[i]), 0, -1, 'WITHSCORES')
      for j = 1, #entries, 2 do
        heads[#heads + 1] = {team = entries[j], target = ids[i], score = tonumber(entries[j + 1])}
        if not named[entries[j]] then
          named[entries[j]] = true
          teams[#teams + 1] = entries[j]
        end
      end
    end
  end
  if #heads == 0 then
    return nil, true
  end
  local standings = standingsOf(S, teams)
  local chosen, chosenRank
  for _, head in ipairs(heads) do
    local standing = standings[head.team]
    if not atQuota(standing) then
      -- lower is first, element by element: priority, devices held for its weight, age
      local rank = {math.floor(head.score / PRIORITY_SPAN), standing.running / standing.weight, head.score}
      if not chosenRank or rank[1] < chosenRank[1] or (rank[1] == chosenRank[1]
          and (rank[2] < chosenRank[2] or (rank[2] == chosenRank[2] and rank[3] < chosenRank[3]))) then
        chosen, chosenRank = head, rank
      end
    end
  end
  if not chosen then
    return nil, true
  end
  return getJson(S.key.tasks, rcall('ZRANGE', targetQueueKey(S, chosen.target, chosen.team), 0, 0)[1]), true
end

-- Hand a device that just became free the waiting task the order picks (pickByShare) among those
-- it may run on a host with these `workflows`. Whether it took one.
local function feedDevice(S, deviceId, device, now, workflows)
  local task, looked = pickByShare(S, deviceId, device, workflows)
  if looked then
    S.feedsLeft = S.feedsLeft - 1
  end
  if not task then
    return false
  end
  unqueueTask(S, task)
  assignTask(S, task, deviceId, device, now)
  saveAssigned(S, task)
  return true
end

-- How much of a team's waiting work one step places, and how many of its targets it reads: the
-- bound on the step's time. Past either, the team's place is kept in `placing_teams` and the
-- reaper's next pass goes on from there (placeLeftOver).
local TEAM_PLACEMENTS_PER_STEP = 3
local TEAM_TARGETS_PER_STEP = 6

-- A team below its quota again (a device let go, its cap raised or lifted): its waiting tasks
-- take free devices they may run, in PROTOCOL's order across all its targets (each target's
-- first task, by priority then age), until the team is at its quota or no target has a device.
-- A target whose first task finds no device is passed over for the rest of the step: every task
-- of it asks the same. Starts at `offset` (the targets before it found none in an earlier slice;
-- a device freed since fed itself by the order). A free device has no waiting task it may run but
-- those of teams at their quota, so this gives nobody's device away.
-- Cost: at most TEAM_TARGETS_PER_STEP targets read, each one findDeviceFor, and at most
-- TEAM_PLACEMENTS_PER_STEP tasks placed.
local function placeTeamWork(S, team, now, offset)
  offset = offset or 0
  local standing = standingsOf(S, {team})[team]
  local targetsKey = derived(S, 'team_targets', team)
  local read, placed = 0, 0
  while not atQuota(standing) do
    if read >= TEAM_TARGETS_PER_STEP or placed >= TEAM_PLACEMENTS_PER_STEP then
      rcall('ZADD', S.key.placing_teams, offset, team)
      return
    end
    local target = rcall('ZRANGE', targetsKey, offset, offset)[1]
    if not target then
      break
    end
    read = read + 1
    local task = getJson(S.key.tasks, rcall('ZRANGE', targetQueueKey(S, target, team), 0, 0)[1])
    local deviceId, device
    if task then
      deviceId, device = findDeviceFor(S, task, now)
    end
    if deviceId then
      -- the target's next task moves up (its score only grows: the targets before stay put)
      unqueueTask(S, task)
      assignTask(S, task, deviceId, device, now)
      saveAssigned(S, task)
      standing.running = standing.running + 1
      placed = placed + 1
    else
      offset = offset + 1
    end
  end
  rcall('ZREM', S.key.placing_teams, team)
end

-- A team back under its quota (a task of it let its device go): its waiting work is placed now;
-- or, in a step that lets several devices go at once (a heartbeat dropping devices: it sets
-- `S.teamsBack`), once all are let go (placeTeamsBack). Placed one after the other as they came
-- back, a team's low-priority task could take a free device that another team, back in the same
-- step, has a higher-priority task for.
local function teamBackUnderQuota(S, team, now)
  if S.teamsBack then
    S.teamsBack[team] = true
    return
  end
  placeTeamWork(S, team, now)
end

-- The teams a step brought back under their quotas, each placed (placeTeamWork) in the order of
-- its first waiting task (priority, then age), so the highest-priority work takes the free
-- devices it fits first. Cost: one read a team, then each team's slice.
local function placeTeamsBack(S, now)
  local back = S.teamsBack
  S.teamsBack = nil
  local teams, heads = {}, {}
  for team in pairs(back) do
    local head = rcall('ZRANGE', derived(S, 'team_targets', team), 0, 0, 'WITHSCORES')
    teams[#teams + 1] = team
    heads[team] = tonumber(head[2]) or math.huge
  end
  table.sort(teams, function(a, b) return heads[a] < heads[b] or (heads[a] == heads[b] and a < b) end)
  for _, team in ipairs(teams) do
    placeTeamWork(S, team, now)
  end
end

-- Recompute a device's membership of the free index; a device that becomes free is fed at once.
-- `device` is its record when the caller has just read it; `released` says its reservation was
-- dropped in this step, so it is neither reserved nor (a reserved device never is) free;
-- `feedAnew` says being free proves nothing about the waiting tasks, so the device is fed
-- anew: its host was not online before this step (hostOnline is what every reader checks), or
-- its host's capabilities changed (a workflow task may now run on it). (A device whose labels,
-- driver or host changed left the free index as its record changed: poolDevice.) `host` is its
-- host's hostState when the caller has read it in this step (a heartbeat, for each device).
local function refreshDevice(S, deviceId, now, device, released, feedAnew, host)
  device = device or getJson(S.key.devices, deviceId)
  if not device then
    return
  end
  local shouldBeFree = device.status == 'available'
    and (released or rcall('HEXISTS', S.key.reservations, deviceId) == 0)
    and rcall('HEXISTS', S.key.disabled_devices, deviceId) == 0
  if shouldBeFree then
    host = host or hostState(S, device.host_id, now)
    shouldBeFree = host.schedulable
  end
  if not shouldBeFree then
    if not released then
      removeFree(S, deviceId, device)
    end
    return
  end
  local since = now
  if not released then
    local score = rcall('ZSCORE', derived(S, 'free_devices', device.driver), deviceId)
    if score and not feedAnew then
      return  -- free already, and seen as free: no matching task waits
    end
    if score then
      since = tonumber(score)  -- still idle since then, if no task takes it
      removeFree(S, deviceId, device)  -- a device that takes a task is not free
    end
  end
  -- A step feeds its bound of devices that something may wait for; past it, such a device is not
  -- free (so nothing jumps the queue) until the reaper feeds it. One nothing waits for is free.
  if S.feedsLeft <= 0 then
    if anyWaitsFor(S, deviceId, device) then
      rcall('ZADD', S.key.refresh_devices, since, deviceId)
    else
      addFree(S, deviceId, device, since)
    end
    return
  end
  if not feedDevice(S, deviceId, device, now, host.workflows) then
    addFree(S, deviceId, device, since)
  end
end

-- A step that lets several devices go at once (a heartbeat dropping devices, a run cancelled,
-- a sweep of leases, claims or hosts): between `beginReleases` and `settleReleases` a device let
-- go only has its reservation dropped and counted off its team (releaseDevice, requeueTask);
-- once all are let go, each is fed and the teams back under their quotas are placed
-- (placeTeamsBack). Fed as each went, a device could go to one team while another, whose own
-- device the step had yet to let go, still counted at its quota with an older or
-- higher-priority task for it. `beginReleases` inside such a step changes nothing and says so.
local function beginReleases(S)
  if S.released then
    return false
  end
  S.released, S.teamsBack = {}, {}
  return true
end

-- A device let go by a step (see beginReleases): fed now, or once the step has let all go.
local function deviceLetGo(S, deviceId, now, device, released)
  if S.released then
    S.released[#S.released + 1] = {deviceId, device or false, released}
    return
  end
  refreshDevice(S, deviceId, now, device, released)
end

-- Cost: one refreshDevice a device let go (each within the step's feed bound), then
-- placeTeamsBack.
local function settleReleases(S, now)
  local letGo = S.released
  S.released = nil
  for _, entry in ipairs(letGo) do
    refreshDevice(S, entry[1], now, entry[2] or nil, entry[3])
  end
  placeTeamsBack(S, now)
end

-- The reaper's share of a step that fed its bound of devices: up to `limit` of the devices left
-- in `refresh_devices`, oldest first, each refreshed (fed, or put in the free index) as its step
-- would have. How many it took.
local function refreshWaitingDevices(S, now, limit)
  local due = rcall('ZRANGE', S.key.refresh_devices, 0, limit - 1)
  for _, deviceId in ipairs(due) do
    rcall('ZREM', S.key.refresh_devices, deviceId)
    refreshDevice(S, deviceId, now)
  end
  return #due
end
