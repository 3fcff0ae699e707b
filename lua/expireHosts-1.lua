--[[
  Reaper: hosts whose last heartbeat is older than the offline threshold go offline. Their
  devices leave the free index, and assignments they had not claimed return to the queue (same attempt)
  to be placed on another device.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     at most this many hosts per call
  The index this sweep reads: hosts_online.
  Output:
    {0, number of hosts taken offline}

  Invariant: a host is taken offline once (removed from hosts_online in the step that acts,
  which publishes `host_offline`); its device records stay in the pool, shown with host_online
  false, until it reports again. The teams the call's hosts bring back under their quotas are
  placed once all of them have gone, highest-priority work first (includes/placement.lua,
  beginReleases), never host by host.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/hosts"
local S = deployment(KEYS, ARGV)
local limit = tonumber(ARGV[6])

local now = nowMs()
local stale = rcall('ZRANGEBYSCORE', S.key.hosts_online, '-inf', now - S.offlineAfterMs, 'LIMIT', 0, limit)
-- (The devices let go are fed, and the teams back under their quotas placed, once every host of
-- the call has gone: includes/placement.lua, beginReleases.)
beginReleases(S)
for _, hostId in ipairs(stale) do
  detachHost(S, hostId, now, 'host_offline', false)
  publish(S, {type = 'host_offline', host_id = hostId, at = now})
end
settleReleases(S, now)
return {0, #stale}
