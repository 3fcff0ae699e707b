--[[
  Disable a device (it gets no new work, whatever its heartbeats say; its unclaimed assignment
  goes back to the queue; running work finishes), or enable it again.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     device id
    ARGV[7]     "1" to disable, "0" to enable
    ARGV[8]     the operator's reason (disable)
    ARGV[9]     actor: the operator's name, on every event of this step
    ARGV[10]    actor id: its token's id ("admin" for the bootstrap token), on the same events
  Keys it touches besides those of its includes:
    enrolled_devices  hash  device id -> {host_id, local_id, driver}
  Output:
    {0, changed (0|1)}
    {NOT_FOUND}  neither pooled nor enrolled nor disabled

  Invariants: the flag lives apart from the pooled record, so heartbeats never clear it; a
  disabled device is never in the free index; idempotent (a repeat publishes nothing; disabling again
  updates the reason).
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/pool"
--- @include "includes/placement"
--- @include "includes/tasks"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[9], ARGV[10])
local deviceId = ARGV[6]
local disable = ARGV[7] == '1'
local reason = ARGV[8]

local device = getJson(S.key.devices, deviceId)
if not device and rcall('HEXISTS', S.key.enrolled_devices, deviceId) == 0
    and rcall('HEXISTS', S.key.disabled_devices, deviceId) == 0 then
  return {E.NOT_FOUND}
end
local now = nowMs()
local hostId = device and device.host_id
local changed
if disable then
  changed = 1 - rcall('HEXISTS', S.key.disabled_devices, deviceId)
  putJson(S.key.disabled_devices, deviceId, {reason = reason, at = now})
  if device then
    removeFree(S, deviceId, device)
  end
  local holder = rcall('HGET', S.key.reservations, deviceId)
  local task = holder and getJson(S.key.tasks, holder)
  if task and task.status == 'assigned' then
    unassignTask(S, task, now, 'disable')
  end
  if changed == 1 then
    publish(S, {type = 'device_disabled', device_id = deviceId, host_id = hostId, reason = reason, at = now})
  end
else
  changed = rcall('HDEL', S.key.disabled_devices, deviceId)
  if changed == 1 then
    refreshDevice(S, deviceId, now)
    publish(S, {type = 'device_enabled', device_id = deviceId, host_id = hostId, at = now})
  end
end
return {0, changed}
