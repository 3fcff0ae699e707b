--[[
  Read the standing of hosts as the scheduler reads it (includes/candidates.lua, hostStanding):
  online (by its last heartbeat against the offline threshold, on the Redis clock), draining,
  stalled. What the operator API shows of a device's host and which hosts count as online, so the
  service restates none of these predicates. Reads only.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..] host ids
  Keys it touches:
    host_state:<host>  hash  the host's seen, draining, stalled, capabilities
  Output:
    {0, flags of each host, in the order given}  each the sum of its HOST_FLAGS bits
                                                 (RUNS_WORKFLOW always set: no task is asked about)

  Invariant: changes nothing.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/candidates"
local S = deployment(KEYS, ARGV)
local now = nowMs()
local answer = {0}
for i = 6, #ARGV do
  answer[i - 4] = hostFlags(hostStanding(S, ARGV[i], now, {}))
end
return answer
