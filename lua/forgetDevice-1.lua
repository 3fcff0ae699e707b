--[[
  Un-enroll a managed host's device: its cloud id is retired. The host must enroll the local
  device again (it gets a new id) to pool it; its next heartbeat still reporting the old id is
  told `unknown_device`.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     device id
    ARGV[7]     actor: the operator's name, on the `device_forgotten` event
    ARGV[8]     actor id: its token's id ("admin" for the bootstrap token), on the same events
  Keys it touches besides those of its includes:
    enrolled_devices  hash  device id -> {host_id, local_id, driver}
    local_devices     hash  "host id\0local id" -> {device_id, driver}
    hosts             hash  host id -> host record JSON
  Output:
    {0}
    {NOT_FOUND}    not an enrolled device (static hosts' devices are not enrolled)
    {DEVICE_BUSY}  it holds a task (assigned or running)

  Invariants: a device holding a task is never forgotten; once forgotten, no record names the
  id as pooled, enrolled or disabled, and the host's enrolled-device count drops by one. Its
  runs stay readable for the retention window, then expire. The feed hears `device_forgotten`.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/pool"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[7], ARGV[8])
local deviceId = ARGV[6]

local enrolled = getJson(S.key.enrolled_devices, deviceId)
if not enrolled then
  return {E.NOT_FOUND}
end
if rcall('HEXISTS', S.key.reservations, deviceId) == 1 then
  return {E.DEVICE_BUSY}
end
local current = getJson(S.key.devices, deviceId)
if current then
  unpoolDevice(S, deviceId, current)
end
rcall('HDEL', S.key.disabled_devices, deviceId)
rcall('HDEL', S.key.enrolled_devices, deviceId)
rcall('HDEL', S.key.local_devices, indexMember(enrolled.host_id, enrolled.local_id))
local host = getJson(S.key.hosts, enrolled.host_id)
if host and host.devices_enrolled then
  host.devices_enrolled = math.max(0, host.devices_enrolled - 1)
  putJson(S.key.hosts, enrolled.host_id, host)
end
-- The host's stored snapshot forgets it too, so its next heartbeat that still reports the id is
-- not a byte-equal repeat: it is checked in full and told unknown_device.
local raw = rcall('HGET', S.key.host_snapshots, enrolled.host_id)
if raw then
  local snapshot = cjson.decode(raw)
  local kept = {}
  for _, reported in ipairs(snapshot.devices) do
    if reported.device_id ~= deviceId then
      kept[#kept + 1] = reported
    end
  end
  snapshot.devices = kept
  rcall('HSET', S.key.host_snapshots, enrolled.host_id, cjson.encode(snapshot))
end
rcall('PEXPIRE', derived(S, 'device_runs', deviceId), S.retentionMs)
publish(S, {type = 'device_forgotten', device_id = deviceId, host_id = enrolled.host_id, at = nowMs()})
return {0}
