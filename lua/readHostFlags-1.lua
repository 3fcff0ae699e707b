--[[
  Read the standing of hosts as the scheduler reads it (includes/candidates.lua, hostStanding):
  online (by its last heartbeat against the offline threshold, on the Redis clock), draining,
  stalled. What the operator API shows of a device's host and which hosts count as online, so the
  service restates none of these predicates. Reads only.

  Input:
    KEYS[1] tasks   the deployment's task records: names the slot; every key read is derived from
                    the key base and carries the same hash tag (includes/deployment.lua)
    ARGV[1] host offline threshold (ms since last heartbeat)
    ARGV[2] key base: the deployment's prefix and ':' (`tether:{default}:`)
    ARGV[3..] host ids
  Keys it derives:
    host_state:<host>  hash  the host's seen, draining, stalled, capabilities
  Output:
    {0, flags of each host, in the order given}  each the sum of its HOST_FLAGS bits
                                                 (RUNS_WORKFLOW always set: no task is asked about)

  Invariant: changes nothing.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/candidates"
-- The deployment as hostStanding reads it for no task: the key base and the offline threshold.
local S = {offlineAfterMs = tonumber(ARGV[1]), base = ARGV[2]}
local now = nowMs()
local answer = {0}
for i = 3, #ARGV do
  answer[i - 1] = hostFlags(hostStanding(S, ARGV[i], now, {}))
end
return answer
