--[[
  The pool: the devices hosts report, and the one reading of whether a host is online and may
  take work. Every script reads these predicates the same way (DESIGN.md, "One notion of each
  state"); a sweep records what they already say.

  Functions (each takes the deployment, includes/deployment.lua, first, but labelsMatch):
    freeMember(driver, deviceId)              a device's member of `free` and `devices_by_driver`
    hostState(S, hostId, now)                 what of a host decides whether its devices take
                                              work, in one read: online, draining, stalled,
                                              schedulable (all three allow it), workflows
    hostOnline(S, hostId, now)                its last heartbeat is within the offline threshold
    isOnline(S, seen, now)                    the same, of a `seen` already read
    workflowSet(capabilitiesJson)             the workflows a host lists, as a set, or nil: any
    hostDeviceIds(S, hostId)                  the host's pooled device ids
    poolDevice(S, deviceId, device, previous) put a device record in the pool
    unpoolDevice(S, deviceId, device)         take it out
    labelsMatch(wantedJson, haveJson)         every wanted label present with the same value
    takeFree(S, deviceId, device, host)       take a device out of `free` if its host (hostState)
                                              is online
    workflowOf(task)                          a workflow task's workflow name, or nil
    runsTask(workflows, task)                 whether a host with these workflows may run the task

  Invariants kept: a pooled device is in its host's `host_devices:<host>` and in
  `devices_by_driver` under its driver, and in `free` under nothing else; "online" is the
  heartbeat's age (`seen` of `host_state:<host>`) against the threshold, read against Redis TIME,
  never the membership of `hosts_online` alone (a host the reaper has not swept yet is already
  offline); a workflow task runs only on a host that lists its workflow in its `capabilities`, or
  lists none (an agent older than capabilities, taken to run anything). A host's standing is one
  hash, so the placement that frees a device reads it in one command, not one per flag.
]]
--- @include "includes/common"
--- @include "includes/deployment"

local function freeMember(driver, deviceId)
  return indexMember(driver, deviceId)
end

-- The workflows a host's agent listed (its `capabilities` JSON), as a set {name = true}; nil when
-- it listed none at all: it runs any workflow.
local function workflowSet(capabilitiesJson)
  if not capabilitiesJson then
    return nil
  end
  local set = {}
  for _, name in ipairs(cjson.decode(capabilitiesJson).workflows or {}) do
    set[name] = true
  end
  return set
end

local function isOnline(S, seen, now)
  return seen ~= false and tonumber(seen) > now - S.offlineAfterMs
end

-- What of a host decides whether its devices take work, from one HMGET of `host_state:<host>`:
-- online (last heartbeat within the threshold), draining (an operator's), stalled (a claim timed
-- out and it has not polled since), schedulable (online, neither draining nor stalled), and the
-- workflows it lists (workflowSet).
local function hostState(S, hostId, now)
  local state = rcall('HMGET', derived(S, 'host_state', hostId), 'seen', 'draining', 'stalled', 'capabilities')
  local host = {
    online = isOnline(S, state[1], now),
    draining = state[2] ~= false,
    stalled = state[3] ~= false,
    workflows = workflowSet(state[4]),
  }
  host.schedulable = host.online and not host.draining and not host.stalled
  return host
end

local function hostOnline(S, hostId, now)
  return isOnline(S, rcall('HGET', derived(S, 'host_state', hostId), 'seen'), now)
end

-- The pooled device ids of a host.
local function hostDeviceIds(S, hostId)
  return rcall('SMEMBERS', derived(S, 'host_devices', hostId))
end

-- Put a device record in the pool (`previous` is the record it replaces, or nil). A device
-- (back) in the pool keeps its runs for as long as it stays (includes/events.lua, endRun).
local function poolDevice(S, deviceId, device, previous)
  if not previous then
    rcall('PERSIST', derived(S, 'device_runs', deviceId))
  end
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

-- Take a device out of the pool; its runs are kept a retention longer.
local function unpoolDevice(S, deviceId, device)
  rcall('PEXPIRE', derived(S, 'device_runs', deviceId), S.retentionMs)
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

-- Take a device out of `free` if it is there and its host (hostState) online; whether it was.
-- (The ZREM answers both questions a lookup would, in one command.)
local function takeFree(S, deviceId, device, host)
  return host.online and rcall('ZREM', S.key.free, freeMember(device.driver, deviceId)) == 1
end

-- The name of a workflow task's workflow (its `workflow` is the JSON {name, params}); nil for a
-- goal task.
local function workflowOf(task)
  if task.kind ~= 'workflow' or not task.workflow then
    return nil
  end
  return cjson.decode(task.workflow).name
end

-- Whether a host whose workflows are `workflows` (hostState) may run the task: a goal task
-- runs anywhere, a workflow task where its workflow is listed or nothing is.
local function runsTask(workflows, task)
  if workflows == nil then
    return true
  end
  local name = workflowOf(task)
  return name == nil or workflows[name] == true
end
