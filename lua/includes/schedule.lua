--[[
  Scheduling: the one place that decides which device runs which task, and that writes the
  history of every transition it makes.

  A script that includes this file passes the scheduling keys first, in this order, and builds
  the scheduler with `local S = scheduler(KEYS, ARGV)`:
    KEYS[1]  tasks              hash   task id -> task JSON
    KEYS[2]  tasks_by_status    zset   task id -> its status and age (statusScore, common.lua)
    KEYS[3]  devices            hash   device id -> pooled device JSON
    KEYS[4]  reservations       hash   device id -> task id holding it (assigned or running)
    KEYS[5]  free               zset   "driver\0device id": schedulable, available, unreserved
    KEYS[6]  hosts_online       zset   host id -> last heartbeat (ms)
    KEYS[7]  host_snapshots     hash   host id -> the last accepted snapshot JSON
    KEYS[8]  devices_by_driver  zset   "driver\0device id" of every pooled device
    KEYS[9]  disabled_devices   hash   device id -> {reason, at}
    KEYS[10] hosts_draining     set    host ids an operator drained
    KEYS[11] hosts_stalled      set    host ids that let an assignment's claim time out
    KEYS[12] queue_deadlines    zset   task id -> when a queued task fails queue_timeout (ms)
    KEYS[13] claim_deadlines    zset   task id -> when an unclaimed assignment goes back (ms)
    KEYS[14] retention          zset   task id -> when a terminal task is deleted (ms)
    KEYS[15] feed               stream the deployment's events (task and host), capped
    KEYS[16] stats              hash   deployment-wide counters (expiries, timeouts, retries)
  and the scheduling arguments first:
    ARGV[1] host offline threshold (ms since last heartbeat)
    ARGV[2] how long a process's inbox lives after a wake-up is pushed onto it (ms)
    ARGV[3] key base: the prefix of the keys derived from an id (below), which carries the
            deployment's hash tag, so they hash to the same slot as the keys above
    ARGV[4] claim timeout (ms)
    ARGV[5] retention of terminal tasks (ms)

  Keys derived from an id (key base .. kind .. ':' .. id), one per host, driver, device or process,
  so an operator reads each with one redis-cli command:
    waiting:<driver>         zset   task id -> seq: queued tasks with a selector, oldest first
    waiting_device:<device>  zset   task id -> seq: queued tasks aimed at that device
    assigned:<host>          list   task ids assigned to the host and not claimed yet, in order
    host_devices:<host>      set    the pooled device ids of the host
    polls:<host>             zset   process id -> until when (ms) a poll of the host waits there
    inbox:<process>          list   host ids with new work, for that process's waiting polls
    device_runs:<device>     list   the device's ended runs, newest first
    lease:<task>             string the task's live lease {lease_id, host_id, attempt}, for people:
                                    its TTL is the lease's time left (PTTL); lease_deadlines, not
                                    the key, is what the reaper acts on
  (A task's history and every lease it had live in its record, as `events` and `leases`; the
  live lease's key is for reading it with redis-cli.)

  Invariants kept:
    - a device is in `free` only if it is pooled, `available`, unreserved, not disabled, and its
      host online, not draining and not stalled;
    - a free device has no matching waiting task (each time a device becomes free it takes the
      oldest matching one), so a new task never jumps the queue by taking a free device;
    - a task is in exactly one of: a waiting queue (queued), its host's `assigned` list
      (assigned), a lease (running), or `retention` (terminal); an assigned task has a claim
      deadline;
    - an assignment pushes a wake-up to every process whose poll of that host registered
      before it (a poll registers in the same step that found its host's list empty), so no
      wake-up is lost and none goes to a process that holds no poll of the host;
    - every transition appends its event to the task's history and to the feed in the same step,
      so neither can disagree with the state.
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
    snapshots = keys[7],
    byDriver = keys[8],
    disabled = keys[9],
    draining = keys[10],
    stalled = keys[11],
    queueDeadlines = keys[12],
    claimDeadlines = keys[13],
    retention = keys[14],
    feed = keys[15],
    stats = keys[16],
    offlineAfterMs = tonumber(args[1]),
    inboxTtlMs = tonumber(args[2]),
    base = args[3],
    claimTimeoutMs = tonumber(args[4]),
    retentionMs = tonumber(args[5]),
  }
end

-- The key of one host, driver, device or process (see "Keys derived from an id").
local function derived(S, kind, id)
  return S.base .. kind .. ':' .. id
end

local function freeMember(driver, deviceId)
  return indexMember(driver, deviceId)
end

-- Write a task back, moving it in the status index when its status changed; its JSON.
local function saveTask(S, task, previousStatus)
  if previousStatus ~= task.status then
    rcall('ZADD', S.byStatus, statusScore(task.status, task.seq), task.id)
  end
  local encoded = cjson.encode(task)
  rcall('HSET', S.tasks, task.id, encoded)
  return encoded
end

local function count(S, name)
  rcall('HINCRBY', S.stats, name, 1)
end

-- -- events ----------------------------------------------------------------------------------

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
  publishTo(S.feed, event, S.actor)
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
  event.task_id = task.id
  rcall('XADD', S.feed, 'MAXLEN', '~', FEED_EVENTS_KEPT, '*', 'e', cjson.encode(event))
  event.task_id = nil  -- implied in the history, which lives in the task's own record
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

-- -- hosts and devices -----------------------------------------------------------------------

local function hostOnline(S, hostId, now)
  local seen = rcall('ZSCORE', S.online, hostId)
  return seen ~= false and tonumber(seen) > now - S.offlineAfterMs
end

-- Online, and neither drained by an operator nor stalled (an assignment's claim timed out).
local function hostSchedulable(S, hostId, now)
  return hostOnline(S, hostId, now)
    and rcall('SISMEMBER', S.draining, hostId) == 0
    and rcall('SISMEMBER', S.stalled, hostId) == 0
end

-- The pooled device ids of a host.
local function hostDeviceIds(S, hostId)
  return rcall('SMEMBERS', derived(S, 'host_devices', hostId))
end

-- Put a device record in the pool (`previous` is the record it replaces, or nil).
local function poolDevice(S, deviceId, device, previous)
  if previous and previous.host_id ~= device.host_id then
    rcall('SREM', derived(S, 'host_devices', previous.host_id), deviceId)
  end
  if not previous or previous.host_id ~= device.host_id then
    rcall('SADD', derived(S, 'host_devices', device.host_id), deviceId)
  end
  if previous and previous.driver ~= device.driver then
    rcall('ZREM', S.free, freeMember(previous.driver, deviceId))
    rcall('ZREM', S.byDriver, freeMember(previous.driver, deviceId))
  end
  if not previous or previous.driver ~= device.driver then
    rcall('ZADD', S.byDriver, 0, freeMember(device.driver, deviceId))
  end
  putJson(S.devices, deviceId, device)
end

local function unpoolDevice(S, deviceId, device)
  rcall('HDEL', S.devices, deviceId)
  rcall('SREM', derived(S, 'host_devices', device.host_id), deviceId)
  rcall('ZREM', S.free, freeMember(device.driver, deviceId))
  rcall('ZREM', S.byDriver, freeMember(device.driver, deviceId))
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

-- -- tasks -----------------------------------------------------------------------------------

-- Take a device out of `free` if it is there and its host online; whether it was. (The ZREM
-- answers both questions a lookup would, in one command.)
local function takeFree(S, deviceId, device, now)
  return hostOnline(S, device.host_id, now)
    and rcall('ZREM', S.free, freeMember(device.driver, deviceId)) == 1
end

-- Wake the polls of a host that registered as waiting: push the host id onto the inbox of each
-- process holding one. The registrations are used up; a poll that still finds nothing registers
-- again.
local function wakePolls(S, hostId, now)
  local polls = derived(S, 'polls', hostId)
  local processes = rcall('ZRANGEBYSCORE', polls, now, '+inf')
  if #processes == 0 then
    return
  end
  rcall('DEL', polls)
  for _, process in ipairs(processes) do
    local inbox = derived(S, 'inbox', process)
    rcall('RPUSH', inbox, hostId)
    rcall('PEXPIRE', inbox, S.inboxTtlMs)
  end
end

-- Give a task a device that is not in `free` (taken from it, or just released); the caller
-- saves the task.
local function assignTask(S, task, deviceId, device, now)
  rcall('HSET', S.reservations, deviceId, task.id)
  task.status = 'assigned'
  task.device_id = deviceId
  task.host_id = device.host_id
  task.updated_at = now
  rcall('RPUSH', derived(S, 'assigned', device.host_id), task.id)
  rcall('ZADD', S.claimDeadlines, now + S.claimTimeoutMs, task.id)
  taskEvent(S, task, 'assigned', now)
  wakePolls(S, device.host_id, now)
end

-- A free device matching the task, taken out of `free`, or nil. Devices of hosts gone offline
-- but not yet swept by the reaper are skipped.
local function findDeviceFor(S, task, now)
  if task.target_device then
    local device = getJson(S.devices, task.target_device)
    if device and takeFree(S, task.target_device, device, now) then
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
        rcall('ZREM', S.free, member)
        return deviceId, device
      end
    end
    if #members < 100 then
      return nil
    end
    offset = offset + 100
  end
end

-- The queue a queued task waits in: its device's, or its driver's.
local function waitingKey(S, task)
  if task.target_device then
    return derived(S, 'waiting_device', task.target_device)
  end
  return derived(S, 'waiting', task.driver)
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
      rcall('ZADD', S.queueDeadlines, task.queue_deadline, task.id)
    end
  end
end

local function unqueueTask(S, task)
  rcall('ZREM', waitingKey(S, task), task.id)
  rcall('ZREM', S.queueDeadlines, task.id)
end

-- Hand a device that just became free the oldest waiting task that matches it: the oldest of
-- the tasks aimed at it, or an older task of its driver whose labels it matches.
local function feedDevice(S, deviceId, device, now)
  local directKey = derived(S, 'waiting_device', deviceId)
  local direct = rcall('ZRANGE', directKey, 0, 0, 'WITHSCORES')
  local chosen, chosenKey = direct[1], directKey
  local directSeq = direct[2] and tonumber(direct[2])
  local driverKey = derived(S, 'waiting', device.driver)
  local offset = 0
  local searching = true
  while searching do
    local members = rcall('ZRANGE', driverKey, offset, offset + 99, 'WITHSCORES')
    for i = 1, #members, 2 do
      if directSeq and tonumber(members[i + 1]) > directSeq then
        searching = false
        break
      end
      local candidate = getJson(S.tasks, members[i])
      if candidate and labelsMatch(candidate.labels, device.labels) then
        chosen, chosenKey = members[i], driverKey
        searching = false
        break
      end
    end
    if searching and #members < 200 then
      searching = false
    end
    offset = offset + 100
  end
  if not chosen then
    return false
  end
  local task = getJson(S.tasks, chosen)
  rcall('ZREM', chosenKey, chosen)
  rcall('ZREM', S.queueDeadlines, task.id)
  assignTask(S, task, deviceId, device, now)
  saveTask(S, task, 'queued')
  return true
end

-- Recompute a device's membership of `free`; a device that becomes free is fed at once.
-- `device` is its record when the caller has just read it; `released` says its reservation was
-- dropped in this step, so it is neither reserved nor (a reserved device never is) in `free`;
-- `hostReturned` says its host was not online before this step, so being in `free` meant
-- nothing to placement (hostOnline is what every reader checks) and the device is fed anew.
local function refreshDevice(S, deviceId, now, device, released, hostReturned)
  device = device or getJson(S.devices, deviceId)
  if not device then
    return
  end
  local freeKey = freeMember(device.driver, deviceId)
  local shouldBeFree = device.status == 'available'
    and (released or rcall('HEXISTS', S.reservations, deviceId) == 0)
    and rcall('HEXISTS', S.disabled, deviceId) == 0
    and hostSchedulable(S, device.host_id, now)
  if not shouldBeFree then
    if not released then
      rcall('ZREM', S.free, freeKey)
    end
    return
  end
  if not released and not hostReturned and rcall('ZSCORE', S.free, freeKey) ~= false then
    return  -- free already, and seen as free: no matching task waits
  end
  if hostReturned then
    rcall('ZREM', S.free, freeKey)  -- a device that takes a task is not free
  end
  if not feedDevice(S, deviceId, device, now) then
    rcall('ZADD', S.free, 0, freeKey)
  end
end

-- Remove the task's reservation of its device (if it still holds it); the device id, or nil,
-- and whether the reservation was dropped.
local function dropReservation(S, task)
  local deviceId = task.device_id
  if deviceId and rcall('HGET', S.reservations, deviceId) == task.id then
    rcall('HDEL', S.reservations, deviceId)
    return deviceId, true
  end
  return deviceId, false
end

-- Drop a task's hold on its device and let the device take other work.
-- `finished` marks a device the agent reported busy as available again: the agent has just told
-- us the work that made it busy is over, and waiting for its next heartbeat would idle it.
local function releaseDevice(S, task, now, finished)
  local deviceId, released = dropReservation(S, task)
  if not deviceId then
    return
  end
  local device = nil
  if finished then
    device = getJson(S.devices, deviceId)
    if device and device.status == 'busy' then
      device.status = 'available'
      putJson(S.devices, deviceId, device)
    end
  end
  refreshDevice(S, deviceId, now, device, released)
end

-- A task reaches a terminal status: it is saved, and deleted once the retention has passed.
local function finishTask(S, task, previous, now)
  task.finished_at = now
  task.updated_at = now
  saveTask(S, task, previous)
  rcall('ZADD', S.retention, now + S.retentionMs, task.id)
end

-- A new attempt starts its wait: a fresh queue deadline, and the clock of schedule-to-start.
local function nextAttempt(task, now)
  task.attempt = task.attempt + 1
  task.queued_at = now
  if task.queue_timeout_ms then
    task.queue_deadline = now + task.queue_timeout_ms
  end
end

-- Put a task that held a device back in the queue (same attempt unless the caller bumped it),
-- recording `kind` with `reason` (the event still names the host and device it leaves), and
-- placing it before its old device is freed so it does not wait behind that device.
local function requeueTask(S, task, now, kind, reason)
  local deviceId, released = dropReservation(S, task)
  local previous = task.status
  task.status = 'queued'
  taskEvent(S, task, kind, now, reason)
  task.device_id = nil
  task.host_id = nil
  task.lease_id = nil
  task.updated_at = now
  placeTask(S, task, now)
  -- Saved before its old device is refreshed: feeding that device may read it from its queue.
  saveTask(S, task, previous)
  if deviceId then
    refreshDevice(S, deviceId, now, nil, released)
  end
end

-- An assigned task whose host will not claim it (host offline, device gone, claim timeout,
-- drain, disable) returns to the queue, same attempt.
local function unassignTask(S, task, now, reason)
  rcall('LREM', derived(S, 'assigned', task.host_id), 1, task.id)
  rcall('ZREM', S.claimDeadlines, task.id)
  requeueTask(S, task, now, 'unassigned', reason)
end

-- A host that may take no new work for now (drained, stalled): its devices leave `free`, and
-- the assignments it had not claimed return to the queue to be placed on other hosts' devices.
local function pauseHost(S, hostId, now, reason, dropDevices)
  for _, deviceId in ipairs(hostDeviceIds(S, hostId)) do
    local current = getJson(S.devices, deviceId)
    if current and current.host_id == hostId then
      if dropDevices then
        unpoolDevice(S, deviceId, current)
      else
        rcall('ZREM', S.free, freeMember(current.driver, deviceId))
      end
    end
  end
  local taskIds = rcall('LRANGE', derived(S, 'assigned', hostId), 0, -1)
  for _, taskId in ipairs(taskIds) do
    unassignTask(S, getJson(S.tasks, taskId), now, reason)
  end
  return #taskIds
end

-- A host that may take work again: each of its devices is reconsidered (and fed).
local function resumeHost(S, hostId, now)
  for _, deviceId in ipairs(hostDeviceIds(S, hostId)) do
    local current = getJson(S.devices, deviceId)
    if current and current.host_id == hostId then
      refreshDevice(S, deviceId, now)
    end
  end
end

-- A host that is gone (silent, or revoked): it leaves hosts_online, and is paused; a revoked
-- host's devices also leave the pool (`dropDevices`).
local function detachHost(S, hostId, now, reason, dropDevices)
  rcall('ZREM', S.online, hostId)
  pauseHost(S, hostId, now, reason, dropDevices)
end
