--[[
  Upgrade: move hosts' standing from the earlier layout's keys into `host_state:<host>`.

  The earlier layout kept a host's standing in three keys of the deployment (a set of draining
  hosts, a set of stalled hosts, a hash of capabilities); placement now reads it from one hash per
  host, in one command. Each reaper pass moves what is left, so a deployment upgrades itself on
  its first pass: until then a drained host may take work, which is why the pass comes first.

  Input:
    KEYS[1] hosts_draining     set   (earlier layout) hosts an operator drained
    KEYS[2] hosts_stalled      set   (earlier layout) hosts whose claim timed out
    KEYS[3] host_capabilities  hash  (earlier layout) host id -> capabilities JSON
    KEYS[4] hosts_online       zset  host id -> last heartbeat (ms), the sweep's index
    ARGV[1] key base: the deployment's prefix and ':' (`tether:{default}:`), which each host's
            key is derived from, carrying the same hash tag as the keys above
    ARGV[2] at most this many entries per call
  Keys it derives:
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
local S = {base = ARGV[1]}
local limit = tonumber(ARGV[2])

local moved = 0
for _, flag in ipairs({{KEYS[1], 'draining'}, {KEYS[2], 'stalled'}}) do
  if moved < limit then
    for _, hostId in ipairs(rcall('SPOP', flag[1], limit - moved)) do
      rcall('HSETNX', derived(S, 'host_state', hostId), flag[2], 1)
      moved = moved + 1
    end
  end
end
for _, hostId in ipairs(rcall('HKEYS', KEYS[3])) do
  if moved >= limit then
    break
  end
  rcall('HSETNX', derived(S, 'host_state', hostId), 'capabilities', rcall('HGET', KEYS[3], hostId))
  rcall('HDEL', KEYS[3], hostId)
  moved = moved + 1
end
-- The call that moves the last entry gives each online host its `seen`: heartbeats of the
-- earlier layout wrote only hosts_online.
if moved > 0 and rcall('EXISTS', KEYS[1], KEYS[2], KEYS[3]) == 0 then
  local online = rcall('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  for i = 1, #online, 2 do
    rcall('HSETNX', derived(S, 'host_state', online[i]), 'seen', online[i + 1])
  end
end
return {0, moved}
