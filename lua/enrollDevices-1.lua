--[[
  Enroll a managed host's local devices: each (host, local id) maps to one stable cloud device id.
  All or nothing.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] host id
    ARGV[7] JSON list [{local_id, driver, attributes (JSON string), new_id}] where new_id is the
            cloud id to mint if the device is new
    ARGV[8] SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[9] the most devices one host may have enrolled (COORDINATOR_MAX_DEVICES_PER_HOST)
  Keys it touches:
    hosts             hash  host id -> host record JSON
    local_devices     hash  "host id\0local id" -> {device_id, driver}
    enrolled_devices  hash  device id -> {host_id, local_id, driver, attributes}
    revoked_tokens    set   SHA-256 digests of revoked host tokens
  Output:
    {0, JSON list [{local_id, driver, device_id}] in request order}
    {DRIVER_CONFLICT, local id}  already enrolled on this host with another driver
    {DEVICE_LIMIT}               the batch would take the host past ARGV[9] enrolled devices
    {NOT_ENROLLED_HOST}          not an enrolled host
    {REVOKED}                    the credential is revoked, or no record of the host holds it
                                 (Redis lost it, whatever a cache said)

  Invariants: a rejected batch enrolls nothing; an enrolled device id never changes host or driver;
  the host record's `devices_enrolled` counts its enrolled devices and never exceeds ARGV[9].
]]
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local hostsKey, localKey, enrolledKey = S.key.hosts, S.key.local_devices, S.key.enrolled_devices
local revokedKey = S.key.revoked_tokens
local hostId = ARGV[6]
local devices = cjson.decode(ARGV[7])
local credential = ARGV[8]
local maxDevices = tonumber(ARGV[9])

if credentialRevoked(revokedKey, credential) then
  return {E.REVOKED}
end
-- Only enrolled hosts' credentials reach this script (the service answers a static host's 403
-- itself), so a missing record is a host Redis no longer knows: an unknown credential.
local host = getJson(hostsKey, hostId)
if not host then
  return {E.REVOKED}
end
if host.kind ~= 'enrolled' then
  return {E.NOT_ENROLLED_HOST}
end
if host.token_digest ~= credential then
  return {E.REVOKED}
end

local existing = {}
local added = 0
for i, device in ipairs(devices) do
  local mapped = getJson(localKey, indexMember(hostId, device.local_id))
  if mapped and mapped.driver ~= device.driver then
    return {E.DRIVER_CONFLICT, device.local_id}
  end
  if not mapped then
    added = added + 1
  end
  existing[i] = mapped
end
local enrolledCount = (host.devices_enrolled or 0) + added
if enrolledCount > maxDevices then
  return {E.DEVICE_LIMIT}
end
if added > 0 then
  host.devices_enrolled = enrolledCount
  putJson(hostsKey, hostId, host)
end

local answer = {}
for i, device in ipairs(devices) do
  local deviceId
  if existing[i] then
    deviceId = existing[i].device_id
  else
    deviceId = device.new_id
    putJson(localKey, indexMember(hostId, device.local_id), {device_id = deviceId, driver = device.driver})
    putJson(enrolledKey, deviceId, {
      host_id = hostId, local_id = device.local_id, driver = device.driver, attributes = device.attributes,
    })
  end
  answer[i] = {local_id = device.local_id, driver = device.driver, device_id = deviceId}
end
return {0, cjson.encode(answer)}
