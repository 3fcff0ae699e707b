--[[
  Placement: the one place that decides which device runs which task. A queued task waits in
  its target's queue for its team (`waiting_device:<device>|<team>` when aimed at one device,
  else `waiting:<driver>|<team>`), highest priority first, then oldest; the teams with waiting
  work for a target are `queue_teams_device:<device>` or `queue_teams:<driver>` (a zset: each
  team's first task's score), and the
  targets a team waits for the set `team_queues:<team>` ("d|<device>" or "p|<driver>"). A device
  that becomes free takes, of the tasks it may run, one of the highest priority; of the teams
  with such a task, not at their quota, the one holding the fewest devices for its weight
  (running / weight; ties: the oldest task); that team's oldest (PROTOCOL.md, "Sharing the
  fleet"). A new task takes a free device when its team is not at its quota: a free device has
  no waiting task it may run, but those of teams at their quota.

  Functions (each takes the deployment, includes/deployment.lua, first):
    saveTask(S, task, previousStatus)        write a task back, moving it in `tasks_by_status` and
                                             in its run's counts
    queueScore(task)                         a queued task's order in its queue
    waitingKey(S, task)                      the queue a queued task waits in
    enqueueTask(S, task)                     put a queued task in its queue, with its deadline
    assignTask(S, task, deviceId, device, now)  reserve the device, queue the assignment for its
                                             host, give it a claim deadline, wake the host's polls
    findDeviceFor(S, task, now)              a free device the task may run on, taken from `free`
    placeTask(S, task, now)                  assign a queued task now, or let it wait
    unqueueTask(S, task)                     take a queued task out of its queue
    feedDevice(S, deviceId, device, now, workflows)  a device just free takes the task the order
                                             picks (`workflows`: its host's, hostState)
    placeTeamWork(S, team, now)              a team below its quota again: its waiting tasks
                                             take free devices they may run
    refreshDevice(S, deviceId, now, ...)     recompute a device's membership of `free`

  Invariants kept:
    - a device is in `free` only if it is pooled, `available`, unreserved, not disabled, and its
      host online, not draining and not stalled;
    - a free device has no matching waiting task its host may run, but those of teams at their
      quota (each time a device becomes free, or its host lists new workflows, it takes one; each
      time a team drops below its quota, its waiting tasks take free devices), so a new task
      never jumps the queue by taking a free device;
    - a team's running and queued counts (includes/teams.lua) change with each reservation and
      each queue entry, in the same step; a run's counts (includes/runs.lua) with each status
      its tasks take, in the step that saves them;
    - a task is in exactly one of: a waiting queue (queued), its host's `assigned` list
      (assigned), a lease (running), or `retention` (terminal); an assigned task has a claim
      deadline, and its device's reservation names it;
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

-- A queued task's score in its queue: higher priority first (priorities are -100..100), then
-- older (seq < 2^44, so every score is an exact double).
local PRIORITY_SPAN = 2^44
local function queueScore(task)
  return string.format('%.0f', (100 - (task.priority or 0)) * PRIORITY_SPAN + task.seq)
end

-- The priority a queue score was given (the inverse of queueScore's first part).
local function priorityOfScore(score)
  return 100 - math.floor(tonumber(score) / PRIORITY_SPAN)
end

-- What a queued task waits for, as `team_queues` names it: "d|<device>" or "p|<driver>".
local function queueTarget(task)
  if task.target_device then
    return 'd|' .. task.target_device
  end
  return 'p|' .. task.driver
end

-- The queue of one target (queueTarget's form) for one team.
local function targetQueueKey(S, target, team)
  local id = string.sub(target, 3)
  if string.sub(target, 1, 1) == 'd' then
    return derived(S, 'waiting_device', id .. '|' .. team)
  end
  return derived(S, 'waiting', id .. '|' .. team)
end

-- The set of the teams with tasks waiting for one target.
local function targetTeamsKey(S, target)
  local id = string.sub(target, 3)
  if string.sub(target, 1, 1) == 'd' then
    return derived(S, 'queue_teams_device', id)
  end
  return derived(S, 'queue_teams', id)
end

-- The queue a queued task waits in: its device's or its driver's, for its team.
local function waitingKey(S, task)
  return targetQueueKey(S, queueTarget(task), teamOf(task))
end

-- Put a queued task in its queue, and give it its queue deadline (the caller saves the task).
local function enqueueTask(S, task)
  local team, target = teamOf(task), queueTarget(task)
  local queueKey, teamsKey = targetQueueKey(S, target, team), targetTeamsKey(S, target)
  local score = queueScore(task)
  if rcall('ZADD', queueKey, score, task.id) == 1 then
    countQueued(S, team, 1)
  end
  rcall('ZADD', teamsKey, 'LT', score, team)  -- the team's head: its first task in order
  rcall('SADD', derived(S, 'team_queues', team), target)
  if task.queue_deadline then  -- tasks stored before queue timeouts existed have none
    rcall('ZADD', S.key.queue_deadlines, task.queue_deadline, task.id)
  end
end

-- Give a task a device that is not in `free` (taken from it, or just released); the caller
-- saves the task.
local function assignTask(S, task, deviceId, device, now)
  rcall('HSET', S.key.reservations, deviceId, task.id)
  countHeld(S, teamOf(task), 1)
  task.status = 'assigned'
  task.device_id = deviceId
  task.host_id = device.host_id
  task.updated_at = now
  rcall('RPUSH', derived(S, 'assigned', device.host_id), task.id)
  rcall('ZADD', S.key.claim_deadlines, now + S.claimTimeoutMs, task.id)
  taskEvent(S, task, 'assigned', now)
  wakePolls(S, device.host_id, now)
end

-- A free device matching the task, on a host that may run it (a workflow task: one that lists its
-- workflow, or lists none), taken out of `free`, or nil. Devices of hosts gone offline but not yet
-- swept by the reaper are skipped.
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
  local low, high = prefixRange(task.driver)
  local hostRuns = {}  -- host id -> whether it is online and may run the task, read once per host
  local offset = 0
  while true do
    local members = rcall('ZRANGEBYLEX', S.key.free, low, high, 'LIMIT', offset, 100)
    for _, member in ipairs(members) do
      local deviceId = splitMember(member)[2]
      local device = getJson(S.key.devices, deviceId)
      if device and labelsMatch(task.labels, device.labels) then
        local runs = hostRuns[device.host_id]
        if runs == nil then
          local host = hostState(S, device.host_id, now)
          runs = host.online and runsTask(host.workflows, task)
          hostRuns[device.host_id] = runs
        end
        if runs then
          rcall('ZREM', S.key.free, member)
          return deviceId, device
        end
      end
    end
    if #members < 100 then
      return nil
    end
    offset = offset + 100
  end
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

-- Take a queued task off its queue (and forget its team there once none of its tasks waits).
local function unqueueTask(S, task)
  local team, target = teamOf(task), queueTarget(task)
  local queueKey, teamsKey = targetQueueKey(S, target, team), targetTeamsKey(S, target)
  if rcall('ZREM', queueKey, task.id) == 1 then
    countQueued(S, team, -1)
    local head = rcall('ZRANGE', queueKey, 0, 0, 'WITHSCORES')
    if #head == 0 then
      rcall('ZREM', teamsKey, team)
      rcall('SREM', derived(S, 'team_queues', team), target)
    else
      rcall('ZADD', teamsKey, head[2], team)  -- its head now (the same when another task left)
    end
  end
  rcall('ZREM', S.key.queue_deadlines, task.id)
end

-- The first task of a queue, in its order, that `fits` (the device may run it), or nil; its
-- record and score.
local function firstFitting(S, queueKey, fits)
  local offset = 0
  while true do
    local members = rcall('ZRANGE', queueKey, offset, offset + 99, 'WITHSCORES')
    for i = 1, #members, 2 do
      local candidate = getJson(S.key.tasks, members[i])
      if candidate and fits(candidate) then
        return candidate, tonumber(members[i + 1])
      end
    end
    if #members < 200 then
      return nil
    end
    offset = offset + 100
  end
end

-- The waiting task a device that just became free takes (PROTOCOL.md, "Sharing the fleet"), of
-- those `fits` says it may run in the queues of `targets` (its own and its driver's): the highest
-- priority; of the teams with one of it, not at their quota, the fewest devices held for their
-- weight; then the oldest. Nil when none fits, or every team with one is at its quota.
-- Each team is ranked first by its head (the first task of its queue, whose score `queue_teams`
-- keeps), a bound its first task that fits can only equal or follow; teams are read in that order
-- and the walk stops at the first whose bound ranks after the best found. So a freed device reads
-- one task per team only when the heads do not fit it, never the queues.
local function pickByShare(S, targets, fits)
  local keys = {}
  for i, target in ipairs(targets) do
    keys[i] = targetTeamsKey(S, target)
  end
  -- Nothing waits for any target, the common case at a result: one command answers it for all.
  if rcall('EXISTS', unpack(keys)) == 0 then
    return nil
  end
  local heads = {}  -- {team, target, score} of each team waiting for one of the targets
  local teams = {}
  for n, target in ipairs(targets) do
    local entries = rcall('ZRANGE', keys[n], 0, -1, 'WITHSCORES')
    for i = 1, #entries, 2 do
      heads[#heads + 1] = {team = entries[i], target = target, score = tonumber(entries[i + 1])}
      teams[#teams + 1] = entries[i]
    end
  end
  if #heads == 0 then
    return nil
  end
  local standings = standingsOf(S, teams)
  local function rank(head, score)  -- lower is first, element by element
    local standing = standings[head.team]
    return {math.floor(score / PRIORITY_SPAN), standing.running / standing.weight, score}
  end
  local function before(a, b)
    return a[1] < b[1] or (a[1] == b[1] and (a[2] < b[2] or (a[2] == b[2] and a[3] < b[3])))
  end
  local open = {}
  for _, head in ipairs(heads) do
    if not atQuota(standings[head.team]) then
      head.bound = rank(head, head.score)
      open[#open + 1] = head
    end
  end
  -- The first by bound, found in one pass: when its head fits the device, nothing can rank
  -- before it (every other bound is no earlier), which is the common case; else all, in order.
  local first
  for _, head in ipairs(open) do
    if not first or before(head.bound, first.bound) then
      first = head
    end
  end
  if not first then
    return nil
  end
  local headTask = getJson(S.key.tasks, rcall('ZRANGE', targetQueueKey(S, first.target, first.team), 0, 0)[1])
  if headTask and fits(headTask) then
    return headTask
  end
  table.sort(open, function(a, b) return before(a.bound, b.bound) end)
  local chosen, chosenRank
  for _, head in ipairs(open) do
    if chosenRank and before(chosenRank, head.bound) then
      break
    end
    local task, score = firstFitting(S, targetQueueKey(S, head.target, head.team), fits)
    if task then
      local actual = rank(head, score)
      if not chosenRank or before(actual, chosenRank) then
        chosen, chosenRank = task, actual
      end
    end
  end
  return chosen
end

-- Hand a device that just became free the waiting task the order picks (pickByShare) among those
-- it may run: aimed at it, or of its driver with labels it matches, on a host that may run them.
-- (A workflow task its host does not list stays queued for another host.) Whether it took one.
local function feedDevice(S, deviceId, device, now, workflows)
  local direct = 'd|' .. deviceId
  local task = pickByShare(S, {direct, 'p|' .. device.driver}, function(candidate)
    return runsTask(workflows, candidate)
      and (queueTarget(candidate) == direct or labelsMatch(candidate.labels, device.labels))
  end)
  if not task then
    return false
  end
  unqueueTask(S, task)
  assignTask(S, task, deviceId, device, now)
  saveTask(S, task, 'queued')
  return true
end

-- A team below its quota again (a device let go, its cap raised or lifted): its waiting tasks
-- take free devices they may run, in their order within each target, until the team is at its
-- quota or none fits. A free device has no waiting task it may run but those of teams at their
-- quota, so this gives nobody's device away.
local function placeTeamWork(S, team, now)
  local function done()
    -- At its quota again, or no device free at all (so none to take): the common case at once.
    return atQuota(standingsOf(S, {team})[team]) or rcall('ZCARD', S.key.free) == 0
  end
  for _, target in ipairs(rcall('SMEMBERS', derived(S, 'team_queues', team))) do
    local queueKey = targetQueueKey(S, target, team)
    local offset = 0
    while true do
      if done() then
        return
      end
      local ids = rcall('ZRANGE', queueKey, offset, offset + 99)
      for _, taskId in ipairs(ids) do
        local task = getJson(S.key.tasks, taskId)
        local deviceId, device = findDeviceFor(S, task, now)
        if deviceId then
          unqueueTask(S, task)
          assignTask(S, task, deviceId, device, now)
          saveTask(S, task, 'queued')
          offset = offset - 1  -- it left the queue: the next one moved up
          if done() then
            return
          end
        end
      end
      if #ids < 100 then
        break
      end
      offset = offset + 100
    end
  end
end

-- Recompute a device's membership of `free`; a device that becomes free is fed at once.
-- `device` is its record when the caller has just read it; `released` says its reservation was
-- dropped in this step, so it is neither reserved nor (a reserved device never is) in `free`;
-- `feedAnew` says being in `free` proves nothing about the waiting tasks, so the device is fed
-- anew: its host was not online before this step (hostOnline is what every reader checks), or
-- its host's capabilities changed (a workflow task may now run on it).
local function refreshDevice(S, deviceId, now, device, released, feedAnew)
  device = device or getJson(S.key.devices, deviceId)
  if not device then
    return
  end
  local freeKey = freeMember(device.driver, deviceId)
  local host
  local shouldBeFree = device.status == 'available'
    and (released or rcall('HEXISTS', S.key.reservations, deviceId) == 0)
    and rcall('HEXISTS', S.key.disabled_devices, deviceId) == 0
  if shouldBeFree then
    host = hostState(S, device.host_id, now)
    shouldBeFree = host.schedulable
  end
  if not shouldBeFree then
    if not released then
      rcall('ZREM', S.key.free, freeKey)
    end
    return
  end
  if not released and not feedAnew and rcall('ZSCORE', S.key.free, freeKey) ~= false then
    return  -- free already, and seen as free: no matching task waits
  end
  if feedAnew then
    rcall('ZREM', S.key.free, freeKey)  -- a device that takes a task is not free
  end
  if not feedDevice(S, deviceId, device, now, host.workflows) then
    rcall('ZADD', S.key.free, 0, freeKey)
  end
end
