--[[
  What the service needs to say why a queued task waits (PROTOCOL.md, "Waiting work"; the
  counting is coordinator/state/wait_reasons.py's): the pooled devices its target could use, read in the
  step that queued it (createTask) or on demand (readWaiting).

  Functions:
    hostFlags(S, hostId, now, workflow)  a host's flags, as one number
    waitingCandidates(S, targetDevice, driver, limit, now, workflow)  what a target's devices
                               say, flat

  It reads, of the deployment S (includes/deployment.lua), offlineAfterMs and the keys devices,
  reservations, disabled_devices, hosts_online, hosts_draining, hosts_stalled,
  devices_by_driver and host_capabilities; readWaiting builds an S of those alone.

  Invariant: reads only, in one step, so the counts agree with each other.
]]
--- @include "includes/common"
--- @include "includes/pool"

-- A host's flags, as one number: 1 online, 2 draining, 4 stalled, 8 it may run the workflow
-- (`workflow`, a name, or nil for a goal task: then always).
local function hostFlags(S, hostId, now, workflow)
  local flags = hostOnline(S, hostId, now) and 1 or 0
  local listed = workflow and hostWorkflows(S, hostId)
  if not listed or listed[workflow] then
    flags = flags + 8
  end
  if rcall('SISMEMBER', S.key.hosts_draining, hostId) == 1 then
    flags = flags + 2
  end
  if rcall('SISMEMBER', S.key.hosts_stalled, hostId) == 1 then
    flags = flags + 4
  end
  return flags
end

-- The candidates of a target (one device, or a driver's first `limit` pooled devices in id
-- order), flat: truncated (0|1), then per pooled device its id, record JSON, the task reserving
-- it or false, its disabled JSON or false, and its host's flags (for a task of workflow
-- `workflow`, or nil). Labels are matched by the service, which also decodes the records.
local function waitingCandidates(S, targetDevice, driver, limit, now, workflow)
  local ids = {}
  local truncated = 0
  if targetDevice then
    ids[1] = targetDevice
  else
    local low, high = prefixRange(driver)
    local members = rcall('ZRANGEBYLEX', S.key.devices_by_driver, low, high, 'LIMIT', 0, limit + 1)
    if #members > limit then
      truncated = 1
      members[#members] = nil
    end
    for i, member in ipairs(members) do
      ids[i] = splitMember(member)[2]
    end
  end
  local answer = {truncated}
  if #ids == 0 then
    return answer
  end
  local records = rcall('HMGET', S.key.devices, unpack(ids))
  local reserved = rcall('HMGET', S.key.reservations, unpack(ids))
  local disabled = rcall('HMGET', S.key.disabled_devices, unpack(ids))
  local flagsOf = {}
  for i, raw in ipairs(records) do
    if raw then
      local hostId = cjson.decode(raw).host_id
      flagsOf[hostId] = flagsOf[hostId] or hostFlags(S, hostId, now, workflow)
      local n = #answer
      answer[n + 1] = ids[i]
      answer[n + 2] = raw
      answer[n + 3] = reserved[i]
      answer[n + 4] = disabled[i]
      answer[n + 5] = flagsOf[hostId]
    end
  end
  return answer
end
