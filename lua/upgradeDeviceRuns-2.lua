--[[
  Upgrade: the runs of a pooled device no longer expire.

  Earlier versions gave `device_runs:<device>` a retention's expiry at every run; now the list has
  none while its device is pooled (includes/events.lua, endRun), and gets one when the device
  leaves the pool (includes/pool.lua). So the lists of the pooled devices lose the expiry they
  were given, a batch of devices per call: the walk goes through `devices` with HSCAN from the
  cursor kept in `upgrades`, and the call that ends it marks the upgrade done, after which a call
  costs one read.

  Input:
    KEYS[1] devices   hash  device id -> record: the pooled devices
    KEYS[2] upgrades  hash  upgrade name -> the cursor of its walk under way, or "done"
    ARGV[1] key base: the deployment's prefix and ':' (`tether:{default}:`), which each device's
            list is derived from, carrying the same hash tag as the keys above
    ARGV[2] about this many devices per call (HSCAN's COUNT)
  Keys it derives:
    device_runs:<device>  list  the device's runs
  Output:
    {0, devices walked, 1 when the upgrade is done}

  Invariant: every device pooled when the upgrade starts (or pooled since, which poolDevice
  handles itself) has its list's expiry removed before the upgrade is marked done; a device
  unpooled meanwhile keeps an expiry, set by unpoolDevice.
]]
--- @include "includes/common"
--- @include "includes/deployment"
local devicesKey, upgradesKey = KEYS[1], KEYS[2]
local S = {base = ARGV[1]}

local cursor = rcall('HGET', upgradesKey, 'device_runs')
if cursor == 'done' then
  return {0, 0, 1}
end
local reply = rcall('HSCAN', devicesKey, cursor or '0', 'COUNT', tonumber(ARGV[2]))
local fields = reply[2]
for i = 1, #fields, 2 do
  rcall('PERSIST', derived(S, 'device_runs', fields[i]))
end
local done = reply[1] == '0'
rcall('HSET', upgradesKey, 'device_runs', done and 'done' or reply[1])
return {0, #fields / 2, done and 1 or 0}
