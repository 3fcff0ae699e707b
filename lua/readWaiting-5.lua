--[[
  Read why a queued task waits: the candidates of its target (includes/candidates.lua), counted
  in one step, so the counts agree with each other. Reads only.

  Input:
    KEYS[1] devices            hash  device id -> pooled device JSON
    KEYS[2] reservations       hash  device id -> task id holding it
    KEYS[3] disabled_devices   hash  device id -> {reason, at}
    KEYS[4] devices_by_driver  zset  "driver\0device id" of every pooled device
    KEYS[5] teams              hash  the teams' settings and counts (whether the task's is at its
                                     quota)
    ARGV[1] host offline threshold (ms since last heartbeat)
    ARGV[2] the task's target as JSON, its record's own fields: target_device, or driver and
            labels (JSON text); kind, and workflow (JSON text) for a workflow task; team
    ARGV[3] at most this many of the driver's devices
    ARGV[4] key base: the deployment's prefix and ':' (`tether:{default}:`), which each host's
            key is derived from, carrying the same hash tag as the keys above
  Keys it derives:
    host_state:<host>  hash  a device's host's seen, draining, stalled, capabilities
    pooled_label:<driver>|<name>=<value>  zset  the pooled devices with a label the target asks for
  Output:
    {truncated (0|1), one count per name of CANDIDATE_COUNTS, in its order, team at its quota (0|1)}

  Invariant: changes nothing.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/teams"
--- @include "includes/candidates"
-- The deployment as includes/candidates.lua reads it: these keys, the key base and the offline
-- threshold.
local S = {
  key = {devices = KEYS[1], reservations = KEYS[2], disabled_devices = KEYS[3], devices_by_driver = KEYS[4],
         teams = KEYS[5]},
  offlineAfterMs = tonumber(ARGV[1]),
  base = ARGV[4],
}
return waitingCandidates(S, cjson.decode(ARGV[2]), tonumber(ARGV[3]), nowMs())
