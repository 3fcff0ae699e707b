--[[
  Scheduling: the one place that decides which device runs which task.

  A script that includes this file passes the scheduling keys first, in this order:
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
local K = {
  tasks = KEYS[1],
  byStatus = KEYS[2],
  devices = KEYS[3],
  reservations = KEYS[4],
  free = KEYS[5],
  online = KEYS[6],
  waitingDevice = KEYS[7],
  waitingDriver = KEYS[8],
  assigned = KEYS[9],
}
local offlineAfterMs = tonumber(ARGV[1])
local wakeChannel = ARGV[2]

local function statusMember(status, task)
  return status .. '\0' .. pad(task.seq) .. '\0' .. task.id
end

-- Write a task back, moving it in the status index when its status changed.
local function saveTask(task, previousStatus)
  if previousStatus ~= task.status then
    if previousStatus then
      rcall('ZREM', K.byStatus, statusMember(previousStatus, task))
    end
    rcall('ZADD', K.byStatus, 0, statusMember(task.status, task))
  end
  putJson(K.tasks, task.id, task)
end

local function hostOnline(hostId, now)
  local seen = rcall('ZSCORE', K.online, hostId)
  return seen ~= false and tonumber(seen) > now - offlineAfterMs
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

local function isFree(deviceId, device, now)
  return rcall('ZSCORE', K.free, device.driver .. '\0' .. deviceId) ~= false
    and hostOnline(device.host_id, now)
end

local function assignTask(task, deviceId, device, now)
  local previous = task.status
  rcall('HSET', K.reservations, deviceId, task.id)
  rcall('ZREM', K.free, device.driver .. '\0' .. deviceId)
  task.status = 'assigned'
  task.device_id = deviceId
  task.host_id = device.host_id
  task.updated_at = now
  saveTask(task, previous)
  rcall('ZADD', K.assigned, 0, device.host_id .. '\0' .. pad(task.seq) .. '\0' .. task.id)
  rcall('PUBLISH', wakeChannel, device.host_id)
end

-- A free device matching the task, or nil. Devices of hosts gone offline but not yet swept
-- by the reaper are skipped.
local function findDeviceFor(task, now)
  if task.target_device then
    local device = getJson(K.devices, task.target_device)
    if device and isFree(task.target_device, device, now) then
      return task.target_device, device
    end
    return nil
  end
  local low = '[' .. task.driver .. '\0'
  local high = '(' .. task.driver .. '\1'
  local offset = 0
  while true do
    local members = rcall('ZRANGEBYLEX', K.free, low, high, 'LIMIT', offset, 100)
    for _, member in ipairs(members) do
      local deviceId = splitMember(member)[2]
      local device = getJson(K.devices, deviceId)
      if device and hostOnline(device.host_id, now) and labelsMatch(task.labels, device.labels) then
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
  return (task.target_device or task.driver) .. '\0' .. pad(task.seq) .. '\0' .. task.id
end

local function waitingKey(task)
  if task.target_device then
    return K.waitingDevice
  end
  return K.waitingDriver
end

-- Put a queued task on a free device now, or in its waiting index.
local function placeTask(task, now)
  local deviceId, device = findDeviceFor(task, now)
  if deviceId then
    assignTask(task, deviceId, device, now)
  else
    rcall('ZADD', waitingKey(task), 0, waitingMember(task))
  end
end

local function unqueueTask(task)
  rcall('ZREM', waitingKey(task), waitingMember(task))
end

-- Hand a device that just became free the oldest waiting task that matches it.
local function feedDevice(deviceId, device, now)
  local direct = rcall('ZRANGEBYLEX', K.waitingDevice, '[' .. deviceId .. '\0', '(' .. deviceId .. '\1',
    'LIMIT', 0, 1)[1]
  local directSeq = direct and tonumber(splitMember(direct)[2])
  local chosen, chosenKey = direct, K.waitingDevice
  local low = '[' .. device.driver .. '\0'
  local high = '(' .. device.driver .. '\1'
  local offset = 0
  local searching = true
  while searching do
    local members = rcall('ZRANGEBYLEX', K.waitingDriver, low, high, 'LIMIT', offset, 100)
    for _, member in ipairs(members) do
      local parts = splitMember(member)
      if directSeq and tonumber(parts[2]) > directSeq then
        searching = false
        break
      end
      local candidate = getJson(K.tasks, parts[3])
      if candidate and labelsMatch(candidate.labels, device.labels) then
        chosen, chosenKey = member, K.waitingDriver
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
  local task = getJson(K.tasks, splitMember(chosen)[3])
  assignTask(task, deviceId, device, now)
  return true
end

-- Recompute a device's membership of `free`; a device that becomes free is fed at once.
local function refreshDevice(deviceId, now)
  local device = getJson(K.devices, deviceId)
  if not device then
    return
  end
  local member = device.driver .. '\0' .. deviceId
  local shouldBeFree = device.status == 'available'
    and rcall('HEXISTS', K.reservations, deviceId) == 0
    and hostOnline(device.host_id, now)
  if not shouldBeFree then
    rcall('ZREM', K.free, member)
    return
  end
  local wasFree = rcall('ZSCORE', K.free, member) ~= false
  if wasFree then
    return
  end
  if not feedDevice(deviceId, device, now) then
    rcall('ZADD', K.free, 0, member)
  end
end

-- Remove the task's reservation of its device (if it still holds it); the device id, or nil.
local function dropReservation(task)
  local deviceId = task.device_id
  if deviceId and rcall('HGET', K.reservations, deviceId) == task.id then
    rcall('HDEL', K.reservations, deviceId)
  end
  return deviceId
end

-- Drop a task's hold on its device and let the device take other work.
-- `finished` marks a device the agent reported busy as available again: the agent has just told
-- us the work that made it busy is over, and waiting for its next heartbeat would idle it.
local function releaseDevice(task, now, finished)
  local deviceId = dropReservation(task)
  if not deviceId then
    return
  end
  if finished then
    local device = getJson(K.devices, deviceId)
    if device and device.status == 'busy' then
      device.status = 'available'
      putJson(K.devices, deviceId, device)
    end
  end
  refreshDevice(deviceId, now)
end

-- Put a task that held a device back in the queue (same attempt unless the caller bumped it),
-- placing it before its old device is freed so it does not wait behind that device.
local function requeueTask(task, now)
  local deviceId = dropReservation(task)
  local previous = task.status
  task.status = 'queued'
  task.device_id = nil
  task.host_id = nil
  task.lease_id = nil
  task.updated_at = now
  saveTask(task, previous)
  placeTask(task, now)
  if deviceId then
    refreshDevice(deviceId, now)
  end
end

-- An assigned task whose host will not claim it (host offline, device gone) returns to the queue.
local function unassignTask(task, now)
  rcall('ZREM', K.assigned, task.host_id .. '\0' .. pad(task.seq) .. '\0' .. task.id)
  requeueTask(task, now)
end

-- A host that is gone (silent, or revoked): it leaves hosts_online, its devices leave `free` (and
-- the pool, if `dropDevices`), and the assignments it had not claimed return to the queue to be
-- placed on other hosts' devices.
local function detachHost(hostId, snapshot, now, dropDevices)
  rcall('ZREM', K.online, hostId)
  if snapshot then
    for _, reported in ipairs(snapshot.devices) do
      local current = getJson(K.devices, reported.device_id)
      if current and current.host_id == hostId then
        rcall('ZREM', K.free, current.driver .. '\0' .. reported.device_id)
        if dropDevices then
          rcall('HDEL', K.devices, reported.device_id)
        end
      end
    end
  end
  local members = rcall('ZRANGEBYLEX', K.assigned, '[' .. hostId .. '\0', '(' .. hostId .. '\1')
  for _, member in ipairs(members) do
    unassignTask(getJson(K.tasks, splitMember(member)[3]), now)
  end
end
