--[[
  A host's standing changes: it may take no new work for now (drained by an operator, stalled by
  a claim timeout), takes work again, or is gone (silent past the offline threshold, revoked).

  Functions (each takes the deployment, includes/deployment.lua, first):
    pauseHost(S, hostId, now, reason, dropDevices)   its devices leave the free index (or the
                                                     pool) and its unclaimed assignments go back
                                                     to the queue
    resumeHost(S, hostId, now)                       each of its devices is reconsidered, and fed
    detachHost(S, hostId, now, reason, dropDevices)  it leaves `hosts_online` and is offline at
                                                     once, and is paused

  Invariants kept: a paused or detached host has no device in the free index and no assignment
  waiting for its claim, so a claim that runs after it finds nothing; a resumed host's devices
  each take the waiting task the order picks (at most a step's bound of feeds; the rest wait for
  the reaper, not free).
]]
--- @include "includes/deployment"
--- @include "includes/pool"
--- @include "includes/placement"
--- @include "includes/tasks"

-- A host that may take no new work for now (drained, stalled): its devices leave the free index,
-- and the assignments it had not claimed return to the queue to be placed on other hosts'
-- devices.
local function pauseHost(S, hostId, now, reason, dropDevices)
  for _, deviceId in ipairs(hostDeviceIds(S, hostId)) do
    local current = getJson(S.key.devices, deviceId)
    if current and current.host_id == hostId then
      if dropDevices then
        unpoolDevice(S, deviceId, current)
      else
        removeFree(S, deviceId, current)
      end
    end
  end
  local taskIds = rcall('LRANGE', derived(S, 'assigned', hostId), 0, -1)
  local batch = beginReleases(S)  -- teams back under their quotas placed once all went back
  for _, taskId in ipairs(taskIds) do
    unassignTask(S, getJson(S.key.tasks, taskId), now, reason)
  end
  if batch then
    settleReleases(S, now)
  end
  return #taskIds
end

-- A host that may take work again: each of its devices is reconsidered (and fed).
local function resumeHost(S, hostId, now)
  for _, deviceId in ipairs(hostDeviceIds(S, hostId)) do
    local current = getJson(S.key.devices, deviceId)
    if current and current.host_id == hostId then
      refreshDevice(S, deviceId, now)
    end
  end
end

-- A host that is gone (silent, or revoked): it leaves hosts_online, its last heartbeat leaves its
-- state (so a revoked host is offline at once, however recent that was), and it is paused; a
-- revoked host's devices also leave the pool (`dropDevices`).
local function detachHost(S, hostId, now, reason, dropDevices)
  rcall('ZREM', S.key.hosts_online, hostId)
  rcall('HDEL', derived(S, 'host_state', hostId), 'seen')
  pauseHost(S, hostId, now, reason, dropDevices)
end
