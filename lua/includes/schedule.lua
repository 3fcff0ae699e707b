--[[
  Scheduling: the one place that decides which device runs which task.

  A script that includes this file passes the scheduling keys first, in this order, and builds
  the scheduler with `local S = scheduler(KEYS, ARGV)`:
    KEYS[1] tasks           hash   task id -> task JSON
    KEYS[2] tasks_by_status zset   "status\0seq\0task id" (score 0, lexicographic)
    KEYS[3] devices         hash   device id -> pooled device JSON
    KEYS[4] reservations    hash   device id -> task id holding it (assigned or running)
    KEYS[5] free            zset   "driver\0device id": pooled, available, unreserved, host online
    KEYS[6] hosts_online    zset   host id -> last heartbeat (ms)
    KEYS[7] waiting_device  zset   "device id\0seq\0task id": queued tasks aimed at one device
    KEYS[8] waiting_driver  zset   "driver\0seq\0task id": queued tasks with a selector
    KEYS[9] assigned        zset   "host id\0seq\0task id": assignments waiting for their host's claim
  and the scheduling arguments first:
    ARGV[1] host offline threshold (ms since last heartbeat)
    ARGV[2] wake channel: the host id of every new assignment is published there

  Invariants kept:
    - a device is in `free` only if it is pooled, `available`, unreserved and its host online;
    - a free device has no matching waiting task (each time a device becomes free it takes the
      oldest matching one), so a new task never jumps the queue by taking a free device;
    - a task is in exactly one of: a waiting index (queued), `assigned` (assigned), a lease
      (running), or none (terminal).
]]
-- The scheduler: its keys and settings, from where a script placed them (see above). Every
-- function here takes it as its first argument, so nothing in this file reads KEYS or ARGV.
local function scheduler(keys, args)
  return {
    tasks = keys[1],
    byStatus = keys[2],
    devices = keys[3],
    reservations = keys[4],
    free = keys[5],
    online = keys[6],
    waitingDevice = keys[7],
    waitingDriver = keys[8],
    assigned = keys[9],
    offlineAfterMs = tonumber(args[1]),
    wakeChannel = args[2],
  }
end

local function statusMember(status, task)
  return indexMember(status, pad(task.seq), task.id)
end

-- A task's place in its host's queue of assignments.
local function assignedMember(task)
  return indexMember(task.host_id, pad(task.seq), task.id)
end

local function freeMember(driver, deviceId)
  return indexMember(driver, deviceId)
end

-- Write a task back, moving it in the status index when its status changed.
local function saveTask(S, task, previousStatus)
  if previousStatus ~= task.status then
    if previousStatus then
      rcall('ZREM', S.byStatus, statusMember(previousStatus, task))
    end
    rcall('ZADD', S.byStatus, 0, statusMember(task.status, task))
  end
  putJson(S.tasks, task.id, task)
end

local function hostOnline(S, hostId, now)
  local seen = rcall('ZSCORE', S.online, hostId)
  return seen ~= false and tonumber(seen) > now - S.offlineAfterMs
end

local function labelsMatch(wantedJson, haveJson)
  local wanted = cjson.decode(wantedJson or '{}')
  if next(wanted) == nil then
    return true
  end
  local have = cjson.decode(haveJson or '{}')
  for name, value in pairs(wanted) do
    if have[name] ~= value then
      return false
    end
  end
  return true
end

local function isFree(S, deviceId, device, now)
  return rcall('ZSCORE', S.free, freeMember(device.driver, deviceId)) ~= false
    and hostOnline(S, device.host_id, now)
end

local function assignTask(S, task, deviceId, device, now)
  local previous = task.status
  rcall('HSET', S.reservations, deviceId, task.id)
  rcall('ZREM', S.free, freeMember(device.driver, deviceId))
  task.status = 'assigned'
  task.device_id = deviceId
  task.host_id = device.host_id
  task.updated_at = now
  saveTask(S, task, previous)
  rcall('ZADD', S.assigned, 0, assignedMember(task))
  rcall('PUBLISH', S.wakeChannel, device.host_id)
end

-- A free device matching the task, or nil. Devices of hosts gone offline but not yet swept
-- by the reaper are skipped.
local function findDeviceFor(S, task, now)
  if task.target_device then
    local device = getJson(S.devices, task.target_device)
    if device and isFree(S, task.target_device, device, now) then
      return task.target_device, device
    end
    return nil
  end
  local low, high = prefixRange(task.driver)
  local offset = 0
  while true do
    local members = rcall('ZRANGEBYLEX', S.free, low, high, 'LIMIT', offset, 100)
    for _, member in ipairs(members) do
      local deviceId = splitMember(member)[2]
      local device = getJson(S.devices, deviceId)
      if device and hostOnline(S, device.host_id, now) and labelsMatch(task.labels, device.labels) then
        return deviceId, device
      end
    end
    if #members < 100 then
      return nil
    end
    offset = offset + 100
  end
end

local function waitingMember(task)
  return indexMember(task.target_device or task.driver, pad(task.seq), task.id)
end

local function waitingKey(S, task)
  if task.target_device then
    return S.waitingDevice
  end
  return S.waitingDriver
end

-- Put a queued task on a free device now, or in its waiting index.
local function placeTask(S, task, now)
  local deviceId, device = findDeviceFor(S, task, now)
  if deviceId then
    assignTask(S, task, deviceId, device, now)
  else
    rcall('ZADD', waitingKey(S, task), 0, waitingMember(task))
  end
end

local function unqueueTask(S, task)
  rcall('ZREM', waitingKey(S, task), waitingMember(task))
end

-- Hand a device that just became free the oldest waiting task that matches it.
local function feedDevice(S, deviceId, device, now)
  local directLow, directHigh = prefixRange(deviceId)
  local direct = rcall('ZRANGEBYLEX', S.waitingDevice, directLow, directHigh,
    'LIMIT', 0, 1)[1]
  local directSeq = direct and tonumber(splitMember(direct)[2])
  local chosen, chosenKey = direct, S.waitingDevice
  local low, high = prefixRange(device.driver)
  local offset = 0
  local searching = true
  while searching do
    local members = rcall('ZRANGEBYLEX', S.waitingDriver, low, high, 'LIMIT', offset, 100)
    for _, member in ipairs(members) do
      local parts = splitMember(member)
      if directSeq and tonumber(parts[2]) > directSeq then
        searching = false
        break
      end
      local candidate = getJson(S.tasks, parts[3])
      if candidate and labelsMatch(candidate.labels, device.labels) then
        chosen, chosenKey = member, S.waitingDriver
        searching = false
        break
      end
    end
    if searching and #members < 100 then
      searching = false
    end
    offset = offset + 100
  end
  if not chosen then
    return false
  end
  rcall('ZREM', chosenKey, chosen)
  local task = getJson(S.tasks, splitMember(chosen)[3])
  assignTask(S, task, deviceId, device, now)
  return true
end

-- Recompute a device's membership of `free`; a device that becomes free is fed at once.
local function refreshDevice(S, deviceId, now)
  local device = getJson(S.devices, deviceId)
  if not device then
    return
  end
  local freeKey = freeMember(device.driver, deviceId)
  local shouldBeFree = device.status == 'available'
    and rcall('HEXISTS', S.reservations, deviceId) == 0
    and hostOnline(S, device.host_id, now)
  if not shouldBeFree then
    rcall('ZREM', S.free, freeKey)
    return
  end
  local wasFree = rcall('ZSCORE', S.free, freeKey) ~= false
  if wasFree then
    return
  end
  if not feedDevice(S, deviceId, device, now) then
    rcall('ZADD', S.free, 0, freeKey)
  end
end

-- Remove the task's reservation of its device (if it still holds it); the device id, or nil.
local function dropReservation(S, task)
  local deviceId = task.device_id
  if deviceId and rcall('HGET', S.reservations, deviceId) == task.id then
    rcall('HDEL', S.reservations, deviceId)
  end
  return deviceId
end

-- Drop a task's hold on its device and let the device take other work.
-- `finished` marks a device the agent reported busy as available again: the agent has just told
-- us the work that made it busy is over, and waiting for its next heartbeat would idle it.
local function releaseDevice(S, task, now, finished)
  local deviceId = dropReservation(S, task)
  if not deviceId then
    return
  end
  if finished then
    local device = getJson(S.devices, deviceId)
    if device and device.status == 'busy' then
      device.status = 'available'
      putJson(S.devices, deviceId, device)
    end
  end
  refreshDevice(S, deviceId, now)
end

-- Put a task that held a device back in the queue (same attempt unless the caller bumped it),
-- placing it before its old device is freed so it does not wait behind that device.
local function requeueTask(S, task, now)
  local deviceId = dropReservation(S, task)
  local previous = task.status
  task.status = 'queued'
  task.device_id = nil
  task.host_id = nil
  task.lease_id = nil
  task.updated_at = now
  saveTask(S, task, previous)
  placeTask(S, task, now)
  if deviceId then
    refreshDevice(S, deviceId, now)
  end
end

-- An assigned task whose host will not claim it (host offline, device gone) returns to the queue.
local function unassignTask(S, task, now)
  rcall('ZREM', S.assigned, assignedMember(task))
  requeueTask(S, task, now)
end

-- A host that is gone (silent, or revoked): it leaves hosts_online, its devices leave `free` (and
-- the pool, if `dropDevices`), and the assignments it had not claimed return to the queue to be
-- placed on other hosts' devices.
local function detachHost(S, hostId, snapshot, now, dropDevices)
  rcall('ZREM', S.online, hostId)
  if snapshot then
    for _, reported in ipairs(snapshot.devices) do
      local current = getJson(S.devices, reported.device_id)
      if current and current.host_id == hostId then
        rcall('ZREM', S.free, freeMember(current.driver, reported.device_id))
        if dropDevices then
          rcall('HDEL', S.devices, reported.device_id)
        end
      end
    end
  end
  local members = rcall('ZRANGEBYLEX', S.assigned, prefixRange(hostId))
  for _, member in ipairs(members) do
    unassignTask(S, getJson(S.tasks, splitMember(member)[3]), now)
  end
end
