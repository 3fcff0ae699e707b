--[[
  Read why a queued task waits: the candidates of its target (includes/candidates.lua), counted
  in one step, so the counts agree with each other. Reads only.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] the task's target as JSON, its record's own fields: target_device, or driver and
            labels (JSON text); kind, and workflow (JSON text) for a workflow task; team
    ARGV[7] at most this many of the driver's devices
  Keys it touches:
    devices            hash  device id -> pooled device JSON
    reservations       hash  device id -> task id holding it
    disabled_devices   hash  device id -> {reason, at}
    devices_by_driver  zset  "driver\0device id" of every pooled device
    teams              hash  the teams' settings and counts (whether the task's is at its
                             quota)
    host_state:<host>  hash  a device's host's seen, draining, stalled, capabilities
    pooled_label:<driver>|<name>=<value>  zset  the pooled devices with a label the target asks for
  Output:
    {truncated (0|1), one count per name of CANDIDATE_COUNTS, in its order, team at its quota (0|1)}

  Invariant: changes nothing.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/teams"
--- @include "includes/candidates"
local S = deployment(KEYS, ARGV)
return waitingCandidates(S, cjson.decode(ARGV[6]), tonumber(ARGV[7]), nowMs())
