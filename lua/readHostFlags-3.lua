--[[
  Read the standing of hosts as the scheduler reads it (includes/candidates.lua, hostStanding):
  online (by its last heartbeat against the offline threshold, on the Redis clock), draining,
  stalled. What the operator API shows of a device's host and which hosts count as online, so the
  service restates none of these predicates. Reads only.

  Input:
    KEYS[1] hosts_online    zset  host id -> last heartbeat (ms)
    KEYS[2] hosts_draining  set
    KEYS[3] hosts_stalled   set
    ARGV[1] host offline threshold (ms since last heartbeat)
    ARGV[2..] host ids
  Output:
    {0, flags of each host, in the order given}  each the sum of its HOST_FLAGS bits
                                                 (RUNS_WORKFLOW always set: no task is asked about)

  Invariant: changes nothing.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/candidates"
-- The deployment as hostStanding reads it for no task: these keys and the offline threshold.
local S = {
  key = {hosts_online = KEYS[1], hosts_draining = KEYS[2], hosts_stalled = KEYS[3]},
  offlineAfterMs = tonumber(ARGV[1]),
}
local now = nowMs()
local answer = {0}
for i = 2, #ARGV do
  answer[i] = hostFlags(hostStanding(S, ARGV[i], now, {}))
end
return answer
