--[[
  Placement: the one place that decides which device runs which task. A queued task waits in
  its target's queue (`waiting_device:<device>` when aimed at one device, else
  `waiting:<driver>`), oldest first; a device that becomes free takes the oldest waiting task it
  matches; a new task takes a free device only when none is older.

  Functions (each takes the deployment, includes/deployment.lua, first):
    saveTask(S, task, previousStatus)        write a task back, moving it in `tasks_by_status`
    waitingKey(S, task)                      the queue a queued task waits in
    assignTask(S, task, deviceId, device, now)  reserve the device, queue the assignment for its
                                             host, give it a claim deadline, wake the host's polls
    findDeviceFor(S, task, now)              a free device the task may run on, taken from `free`
    placeTask(S, task, now)                  assign a queued task now, or let it wait
    unqueueTask(S, task)                     take a queued task out of its queue
    feedDevice(S, deviceId, device, now)     a device just free takes the oldest task it matches
    refreshDevice(S, deviceId, now, ...)     recompute a device's membership of `free`

  Invariants kept:
    - a device is in `free` only if it is pooled, `available`, unreserved, not disabled, and its
      host online, not draining and not stalled;
    - a free device has no matching waiting task its host may run (each time a device becomes
      free, or its host lists new workflows, it takes the oldest such one), so a new task never
      jumps the queue by taking a free device;
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

-- Write a task back, moving it in the status index when its status changed; its JSON.
local function saveTask(S, task, previousStatus)
  if previousStatus ~= task.status then
    rcall('ZADD', S.key.tasks_by_status, statusScore(task.status, task.seq), task.id)
  end
  local encoded = cjson.encode(task)
  rcall('HSET', S.key.tasks, task.id, encoded)
  return encoded
end

-- The queue a queued task waits in: its device's, or its driver's.
local function waitingKey(S, task)
  if task.target_device then
    return derived(S, 'waiting_device', task.target_device)
  end
  return derived(S, 'waiting', task.driver)
end

-- Give a task a device that is not in `free` (taken from it, or just released); the caller
-- saves the task.
local function assignTask(S, task, deviceId, device, now)
  rcall('HSET', S.key.reservations, deviceId, task.id)
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
    if device and runsTask(hostWorkflows(S, device.host_id), task)
        and takeFree(S, task.target_device, device, now) then
      return task.target_device, device
    end
    return nil
  end
  local low, high = prefixRange(task.driver)
  local hostRuns = {}  -- host id -> whether it may run the task, read once per host
  local offset = 0
  while true do
    local members = rcall('ZRANGEBYLEX', S.key.free, low, high, 'LIMIT', offset, 100)
    for _, member in ipairs(members) do
      local deviceId = splitMember(member)[2]
      local device = getJson(S.key.devices, deviceId)
      if device and hostOnline(S, device.host_id, now) and labelsMatch(task.labels, device.labels) then
        local runs = hostRuns[device.host_id]
        if runs == nil then
          runs = runsTask(hostWorkflows(S, device.host_id), task)
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

-- Put a queued task on a free device now, or in its waiting index with its queue deadline
-- (the caller saves the task).
local function placeTask(S, task, now)
  local deviceId, device = findDeviceFor(S, task, now)
  if deviceId then
    assignTask(S, task, deviceId, device, now)
  else
    rcall('ZADD', waitingKey(S, task), task.seq, task.id)
    if task.queue_deadline then  -- tasks stored before queue timeouts existed have none
      rcall('ZADD', S.key.queue_deadlines, task.queue_deadline, task.id)
    end
  end
end

local function unqueueTask(S, task)
  rcall('ZREM', waitingKey(S, task), task.id)
  rcall('ZREM', S.key.queue_deadlines, task.id)
end

-- The oldest task of a waiting queue that the device may run, no younger than `beforeSeq` (nil:
-- any age), or nil; its id and seq. `fits(task)` says whether the task's target takes the device.
local function oldestRunnable(S, queueKey, beforeSeq, fits)
  local offset = 0
  while true do
    local members = rcall('ZRANGE', queueKey, offset, offset + 99, 'WITHSCORES')
    for i = 1, #members, 2 do
      local seq = tonumber(members[i + 1])
      if beforeSeq and seq > beforeSeq then
        return nil
      end
      local candidate = getJson(S.key.tasks, members[i])
      if candidate and fits(candidate) then
        return members[i], seq
      end
    end
    if #members < 200 then
      return nil
    end
    offset = offset + 100
  end
end

-- Hand a device that just became free the oldest waiting task that matches it and that its host
-- may run: the oldest such of the tasks aimed at it, or an older such task of its driver whose
-- labels it matches. (A workflow task its host does not list stays queued for another host.)
local function feedDevice(S, deviceId, device, now)
  local workflows = hostWorkflows(S, device.host_id)
  local function runnable(task)
    return runsTask(workflows, task)
  end
  local directKey = derived(S, 'waiting_device', deviceId)
  local chosen, directSeq = oldestRunnable(S, directKey, nil, runnable)
  local chosenKey = directKey
  local driverKey = derived(S, 'waiting', device.driver)
  local older = oldestRunnable(S, driverKey, directSeq, function(task)
    return labelsMatch(task.labels, device.labels) and runsTask(workflows, task)
  end)
  if older then
    chosen, chosenKey = older, driverKey
  end
  if not chosen then
    return false
  end
  local task = getJson(S.key.tasks, chosen)
  rcall('ZREM', chosenKey, chosen)
  rcall('ZREM', S.key.queue_deadlines, task.id)
  assignTask(S, task, deviceId, device, now)
  saveTask(S, task, 'queued')
  return true
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
  local shouldBeFree = device.status == 'available'
    and (released or rcall('HEXISTS', S.key.reservations, deviceId) == 0)
    and rcall('HEXISTS', S.key.disabled_devices, deviceId) == 0
    and hostSchedulable(S, device.host_id, now)
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
  if not feedDevice(S, deviceId, device, now) then
    rcall('ZADD', S.key.free, 0, freeKey)
  end
end
