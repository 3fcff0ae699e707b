--[[
  Upgrade: move hosts' standing from the earlier layout's keys into `host_state:<host>`.

  The earlier layout kept a host's standing in three keys of the deployment (a set of draining
  hosts, a set of stalled hosts, a hash of capabilities); placement now reads it from one hash per
  host, in one command. Each reaper pass moves what is left, so a deployment upgrades itself on
  its first pass: until then a drained host may take work, which is why the pass comes first.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] at most this many entries per call
  Keys it touches (the earlier layout's are named here only, as the key base and their name:
  keys.py names the current layout):
    hosts_draining     set   (earlier layout) hosts an operator drained
    hosts_stalled      set   (earlier layout) hosts whose claim timed out
    host_capabilities  hash  (earlier layout) host id -> capabilities JSON
    hosts_online       zset  host id -> last heartbeat (ms), the sweep's index
    host_state:<host>  hash  `draining`, `stalled`, `capabilities`, `seen`
  Output:
    {0, number of entries moved}

  Invariant: each entry of the earlier layout is moved once (removed in the step that writes it),
  and never over what the current layout already holds for that host; once the last is moved,
  each host of hosts_online gets its last heartbeat as `seen`, so no online host reads as
  offline after the upgrade.
]]
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local limit = tonumber(ARGV[6])
local draining, stalled = S.base .. 'hosts_draining', S.base .. 'hosts_stalled'
local capabilities = S.base .. 'host_capabilities'

local moved = 0
for _, flag in ipairs({{draining, 'draining'}, {stalled, 'stalled'}}) do
  if moved < limit then
    for _, hostId in ipairs(rcall('SPOP', flag[1], limit - moved)) do
      rcall('HSETNX', derived(S, 'host_state', hostId), flag[2], 1)
      moved = moved + 1
    end
  end
end
for _, hostId in ipairs(rcall('HKEYS', capabilities)) do
  if moved >= limit then
    break
  end
  rcall('HSETNX', derived(S, 'host_state', hostId), 'capabilities', rcall('HGET', capabilities, hostId))
  rcall('HDEL', capabilities, hostId)
  moved = moved + 1
end
-- The call that moves the last entry gives each online host its `seen`: heartbeats of the
-- earlier layout wrote only hosts_online.
if moved > 0 and rcall('EXISTS', draining, stalled, capabilities) == 0 then
  local online = rcall('ZRANGE', S.key.hosts_online, 0, -1, 'WITHSCORES')
  for i = 1, #online, 2 do
    rcall('HSETNX', derived(S, 'host_state', online[i]), 'seen', online[i + 1])
  end
end
return {0, moved}
