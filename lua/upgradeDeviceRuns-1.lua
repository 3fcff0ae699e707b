--[[
  Upgrade: the runs of a pooled device no longer expire.

  Earlier versions gave `device_runs:<device>` a retention's expiry at every run; now the list has
  none while its device is pooled (includes/events.lua, endRun), and gets one when the device
  leaves the pool (includes/pool.lua). So the lists of the pooled devices lose the expiry they
  were given, a batch of devices per call: the walk goes through `devices` with HSCAN from the
  cursor kept in `upgrades`, and the call that ends it marks the upgrade done, after which a call
  costs one read.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] about this many devices per call (HSCAN's COUNT)
  Keys it touches:
    devices   hash  device id -> record: the pooled devices
    upgrades  hash  upgrade name -> the cursor of its walk under way, or "done"
    device_runs:<device>  list  the device's runs
  Output:
    {0, devices walked, 1 when the upgrade is done}

  Invariant: every device pooled when the upgrade starts (or pooled since, which poolDevice
  handles itself) has its list's expiry removed before the upgrade is marked done; a device
  unpooled meanwhile keeps an expiry, set by unpoolDevice.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/upgrades"
local S = deployment(KEYS, ARGV)
local walked, done = walkHash(S, 'device_runs', S.key.devices, tonumber(ARGV[6]), function(deviceId)
  rcall('PERSIST', derived(S, 'device_runs', deviceId))
end)
return {0, walked, done and 1 or 0}
