--[[
  The pool: the devices hosts report, and the one reading of whether a host is online and may
  take work. Every script reads these predicates the same way (DESIGN.md, "One notion of each
  state"); a sweep records what they already say.

  Functions (each takes the deployment, includes/deployment.lua, first, but labelsMatch):
    freeMember(driver, deviceId)              a device's member of `devices_by_driver`
    labelIndex(driver, name, value)           the id of a driver's index by one label
    freeKeys(S, driver, labels)               the free sets a device (or a selector) of these
                                              labels (a table) is in (asks for)
    addFree(S, deviceId, device, since)       put it in: its driver's set and each label's
    removeFree(S, deviceId, device)           take it out (of the sets its record names)
    indexPooled(S, deviceId, record, command, kept)  a pooled device in or out of its labels'
                                              index (but for the labels `kept` has too)
    hostState(S, hostId, now)                 what of a host decides whether its devices take
                                              work, in one read: online, draining, stalled,
                                              schedulable (all three allow it), workflows
    hostOnline(S, hostId, now)                its last heartbeat is within the offline threshold
    isOnline(S, seen, now)                    the same, of a `seen` already read
    workflowSet(capabilitiesJson)             the workflows a host lists, as a set, or nil: any
    hostDeviceIds(S, hostId)                  the host's pooled device ids
    poolDevice(S, deviceId, device, previous) put a device record in the pool; a device whose
                                              driver, labels or host changed leaves the free
                                              index, so refreshDevice offers it the waiting
                                              work it can run now
    unpoolDevice(S, deviceId, device)         take it out
    labelsMatch(wantedJson, haveJson)         every wanted label present with the same value
    takeFree(S, deviceId, device, host)       take a device out of the free index if its host
                                              (hostState) is online
    workflowOf(task)                          a workflow task's workflow name, SESSIONS_NEED for a
                                              session, or nil
    runsTask(workflows, task)                 whether a host with these workflows may run the task
    runsWorkflow(workflows, name)             the same, of a workflow's name (nil: a goal)

  The free index: `free_devices:<driver>` holds a driver's free devices, and
  `free_label:<driver>|<name>=<value>` those with one label, each scored by when the device
  became free, so the devices that fit a selector are one intersection, idle longest first. A free
  transition costs 1 + the device's labels commands.

  Invariants kept: a pooled device is in its host's `host_devices:<host>`, in
  `devices_by_driver` under its driver, and in `pooled_label:<driver>|<name>=<value>` for each of
  its labels and no other; a free device is in its driver's free set and in the set
  of each of its labels, as its record names them, and in no other; "online" is the
  heartbeat's age (`seen` of `host_state:<host>`) against the threshold, read against Redis TIME,
  never the membership of `hosts_online` alone (a host the reaper has not swept yet is already
  offline); a workflow task runs only on a host that lists its workflow in its `capabilities`, or
  lists none (an agent older than capabilities, taken to run anything); a session only on a host
  whose `capabilities` say `"sessions": true` (never one that lists none). A host's standing is one
  hash, so the placement that frees a device reads it in one command, not one per flag.
]]
--- @include "includes/common"
--- @include "includes/deployment"

local function freeMember(driver, deviceId)
  return indexMember(driver, deviceId)
end

-- `<driver>|<name>=<value>`, readable in redis-cli; `%`, `|` and `=` in a name or value written
-- as %XX, so no two labels share an index.
local function escapeLabel(text)
  if not string.find(text, '[%%|=]') then
    return text  -- the common case, without building a replacement (every index move calls this)
  end
  return (string.gsub(text, '[%%|=]', function(c) return string.format('%%%02X', string.byte(c)) end))
end

local function labelIndex(driver, name, value)
  return driver .. '|' .. escapeLabel(name) .. '=' .. escapeLabel(value)
end

-- The free sets of a driver and of each label of `labels` (a decoded table): where a device with
-- them is while it is free, and what a selector asking for them intersects.
local function freeKeys(S, driver, labels)
  local keys = {derived(S, 'free_devices', driver)}
  for name, value in pairs(labels) do
    keys[#keys + 1] = derived(S, 'free_label', labelIndex(driver, name, value))
  end
  return keys
end

-- `since`: when it became free (ms), its order among the free (idle longest first).
local function addFree(S, deviceId, device, since)
  for _, key in ipairs(freeKeys(S, device.driver, cjson.decode(device.labels or '{}'))) do
    rcall('ZADD', key, since, deviceId)
  end
end

-- Whether it was free. Its label sets are read off the record it was added with: a record about
-- to change takes its device out first (poolDevice).
local function removeFree(S, deviceId, device)
  if rcall('ZREM', derived(S, 'free_devices', device.driver), deviceId) == 0 then
    return false
  end
  for name, value in pairs(cjson.decode(device.labels or '{}')) do
    rcall('ZREM', derived(S, 'free_label', labelIndex(device.driver, name, value)), deviceId)
  end
  return true
end

-- A pooled device in (`ZADD`) or out of (`ZREM`) the index of each of its labels, as `record`
-- names them: a selector's matching devices are the intersection of its labels' (candidates).
-- `kept`: the record it is leaving or joining from; a label it names too (same driver, same
-- value) stays where it is, so a relabel moves only the labels that changed.
local function indexPooled(S, deviceId, record, command, kept)
  local keptLabels = {}
  if kept and kept.driver == record.driver then
    keptLabels = cjson.decode(kept.labels or '{}')
  end
  for name, value in pairs(cjson.decode(record.labels or '{}')) do
    if keptLabels[name] ~= value then
      local key = derived(S, 'pooled_label', labelIndex(record.driver, name, value))
      if command == 'ZADD' then
        rcall('ZADD', key, 0, deviceId)
      else
        rcall('ZREM', key, deviceId)
      end
    end
  end
end

-- What a live session asks of its host, carried where a workflow task carries its workflow's name
-- (so targets, their interning and every check of a host's workflows carry it unchanged): its
-- agent lists `"sessions": true`. No workflow is named so ('@' is no id character).
local SESSIONS_NEED = '@sessions'

-- The workflows a host's agent listed (its `capabilities` JSON), as a set {name = true}, with
-- SESSIONS_NEED when it runs sessions; nil when it listed none at all: it runs any workflow (and
-- no session).
local function workflowSet(capabilitiesJson)
  if not capabilitiesJson then
    return nil
  end
  local capabilities = cjson.decode(capabilitiesJson)
  local set = {}
  for _, name in ipairs(capabilities.workflows or {}) do
    set[name] = true
  end
  if capabilities.sessions == true then
    set[SESSIONS_NEED] = true
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
  -- What placement matches it by changed (its driver, labels, or host and so the host's
  -- workflows): it leaves the free index as its old record had it, and the caller's refreshDevice
  -- offers it the waiting work it can run now (or puts it back). Its attributes match no selector,
  -- so a change of them (a battery level) keeps its place, and its idle time, in the index.
  if previous and (previous.driver ~= device.driver or previous.labels ~= device.labels
      or previous.host_id ~= device.host_id) then
    removeFree(S, deviceId, previous)
  end
  if previous and previous.driver ~= device.driver then
    rcall('ZREM', S.key.devices_by_driver, freeMember(previous.driver, deviceId))
  end
  if not previous or previous.driver ~= device.driver or previous.labels ~= device.labels then
    if previous then
      indexPooled(S, deviceId, previous, 'ZREM', device)
    end
    indexPooled(S, deviceId, device, 'ZADD', previous)
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
  removeFree(S, deviceId, device)
  indexPooled(S, deviceId, device, 'ZREM')
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

-- Take a device out of the free index if it is there and its host (hostState) online; whether it
-- was. (The ZREM answers both questions a lookup would, in one command.)
local function takeFree(S, deviceId, device, host)
  return host.online and removeFree(S, deviceId, device)
end

-- The name of a workflow task's workflow (its `workflow` is the JSON {name, params}); nil for a
-- goal task.
local function workflowOf(task)
  if task.kind == 'session' then
    return SESSIONS_NEED
  end
  if task.kind ~= 'workflow' or not task.workflow then
    return nil
  end
  return cjson.decode(task.workflow).name
end

-- Whether a host whose workflows are `workflows` (hostState) may run the task: a goal task
-- runs anywhere, a workflow task where its workflow is listed or nothing is.
-- runsTask, of a workflow's name (nil or '' for a goal; SESSIONS_NEED for a session, which only
-- a host listing it runs).
local function runsWorkflow(workflows, name)
  if name == SESSIONS_NEED then
    return workflows ~= nil and workflows[name] == true
  end
  return workflows == nil or name == nil or name == '' or workflows[name] == true
end

local function runsTask(workflows, task)
  return runsWorkflow(workflows, workflowOf(task))
end
