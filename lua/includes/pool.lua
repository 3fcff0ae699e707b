--[[
  The pool: the devices hosts report, and the one reading of whether a host is online and may
  take work. Every script reads these predicates the same way (DESIGN.md, "One notion of each
  state"); a sweep records what they already say.

  Functions (each takes the deployment, includes/deployment.lua, first, but labelsMatch):
    freeMember(driver, deviceId)              a device's member of `free` and `devices_by_driver`
    hostOnline(S, hostId, now)                its last heartbeat is within the offline threshold
    hostSchedulable(S, hostId, now)           online, and neither draining nor stalled
    hostDeviceIds(S, hostId)                  the host's pooled device ids
    poolDevice(S, deviceId, device, previous) put a device record in the pool
    unpoolDevice(S, deviceId, device)         take it out
    labelsMatch(wantedJson, haveJson)         every wanted label present with the same value
    takeFree(S, deviceId, device, now)        take a device out of `free` if it is usable there
    hostWorkflows(S, hostId)                  the workflows a host lists, as a set, or nil: any
    workflowOf(task)                          a workflow task's workflow name, or nil
    runsTask(workflows, task)                 whether a host with these workflows may run the task

  Invariants kept: a pooled device is in its host's `host_devices:<host>` and in
  `devices_by_driver` under its driver, and in `free` under nothing else; "online" is the
  heartbeat's age against the threshold, read against Redis TIME, never the membership of
  `hosts_online` alone (a host the reaper has not swept yet is already offline); a workflow task
  runs only on a host that lists its workflow in `host_capabilities`, or has no entry there (an
  agent older than capabilities, taken to run anything).
]]
--- @include "includes/common"
--- @include "includes/deployment"

local function freeMember(driver, deviceId)
  return indexMember(driver, deviceId)
end

local function hostOnline(S, hostId, now)
  local seen = rcall('ZSCORE', S.key.hosts_online, hostId)
  return seen ~= false and tonumber(seen) > now - S.offlineAfterMs
end

-- Online, and neither drained by an operator nor stalled (an assignment's claim timed out).
local function hostSchedulable(S, hostId, now)
  return hostOnline(S, hostId, now)
    and rcall('SISMEMBER', S.key.hosts_draining, hostId) == 0
    and rcall('SISMEMBER', S.key.hosts_stalled, hostId) == 0
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
    rcall('ZREM', S.key.free, freeMember(previous.driver, deviceId))
    rcall('ZREM', S.key.devices_by_driver, freeMember(previous.driver, deviceId))
  end
  if not previous or previous.driver ~= device.driver then
    rcall('ZADD', S.key.devices_by_driver, 0, freeMember(device.driver, deviceId))
  end
  putJson(S.key.devices, deviceId, device)
end

local function unpoolDevice(S, deviceId, device)
  rcall('HDEL', S.key.devices, deviceId)
  rcall('SREM', derived(S, 'host_devices', device.host_id), deviceId)
  rcall('ZREM', S.key.free, freeMember(device.driver, deviceId))
  rcall('ZREM', S.key.devices_by_driver, freeMember(device.driver, deviceId))
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

-- Take a device out of `free` if it is there and its host online; whether it was. (The ZREM
-- answers both questions a lookup would, in one command.)
local function takeFree(S, deviceId, device, now)
  return hostOnline(S, device.host_id, now)
    and rcall('ZREM', S.key.free, freeMember(device.driver, deviceId)) == 1
end

-- The workflows a host's agent listed in its last heartbeat (`host_capabilities`), as a set
-- {name = true}; nil when it listed none at all: it runs any workflow.
local function hostWorkflows(S, hostId)
  local raw = rcall('HGET', S.key.host_capabilities, hostId)
  if not raw then
    return nil
  end
  local set = {}
  for _, name in ipairs(cjson.decode(raw).workflows or {}) do
    set[name] = true
  end
  return set
end

-- The name of a workflow task's workflow (its `workflow` is the JSON {name, params}); nil for a
-- goal task.
local function workflowOf(task)
  if task.kind ~= 'workflow' or not task.workflow then
    return nil
  end
  return cjson.decode(task.workflow).name
end

-- Whether a host whose workflows are `workflows` (hostWorkflows) may run the task: a goal task
-- runs anywhere, a workflow task where its workflow is listed or nothing is.
local function runsTask(workflows, task)
  if workflows == nil then
    return true
  end
  local name = workflowOf(task)
  return name == nil or workflows[name] == true
end
