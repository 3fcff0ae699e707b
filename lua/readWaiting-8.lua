--[[
  Read why a queued task waits: the candidates of its target (includes/candidates.lua), in one
  step, so the counts agree with each other. Reads only.

  Input:
    KEYS[1] devices            hash  device id -> pooled device JSON
    KEYS[2] reservations       hash  device id -> task id holding it
    KEYS[3] disabled_devices   hash  device id -> {reason, at}
    KEYS[4] hosts_online       zset  host id -> last heartbeat (ms)
    KEYS[5] hosts_draining     set
    KEYS[6] hosts_stalled      set
    KEYS[7] devices_by_driver  zset  "driver\0device id" of every pooled device
    KEYS[8] host_capabilities  hash  host id -> {workflows, planners} its agent listed
    ARGV[1] host offline threshold (ms since last heartbeat)
    ARGV[2] the target device id, or "" for a selector
    ARGV[3] the selector's driver (when no device)
    ARGV[4] at most this many of the driver's devices
    ARGV[5] the task's workflow name, or "" for a goal task
  Output:
    {truncated, (device id, record JSON, reserving task | nil, disabled JSON | nil, host flags)...}

  Invariant: changes nothing.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/candidates"
-- The deployment as includes/candidates.lua reads it: these keys and the offline threshold.
local S = {
  key = {
    devices = KEYS[1], reservations = KEYS[2], disabled_devices = KEYS[3], hosts_online = KEYS[4],
    hosts_draining = KEYS[5], hosts_stalled = KEYS[6], devices_by_driver = KEYS[7],
    host_capabilities = KEYS[8],
  },
  offlineAfterMs = tonumber(ARGV[1]),
}
local targetDevice = ARGV[2] ~= '' and ARGV[2] or nil
local workflow = ARGV[5] ~= '' and ARGV[5] or nil
return waitingCandidates(S, targetDevice, ARGV[3], tonumber(ARGV[4]), nowMs(), workflow)
