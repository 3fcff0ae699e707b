--[[
  Drain a host (no new work; its unclaimed assignments go back to the queue; running work
  finishes), or undrain it (its devices take work again at once).

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     host id
    ARGV[7]     "1" to drain, "0" to undrain
    ARGV[8]     actor: the operator's name, on every event of this step
    ARGV[9]     actor id: its token's id ("admin" for the bootstrap token), on the same events
  Output:
    {0, changed (0|1)}

  Invariants: idempotent (a repeat changes nothing and publishes nothing); a draining host has
  no device in the free index and no assignment waiting for its claim, so a claim that runs after the
  drain finds nothing, whichever process serves it.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/hosts"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[8], ARGV[9])
local hostId = ARGV[6]
local drain = ARGV[7] == '1'

local now = nowMs()
local changed
if drain then
  changed = rcall('HSETNX', derived(S, 'host_state', hostId), 'draining', 1)
  if changed == 1 then
    pauseHost(S, hostId, now, 'drain', false)
  end
else
  changed = rcall('HDEL', derived(S, 'host_state', hostId), 'draining')
  if changed == 1 then
    resumeHost(S, hostId, now)
  end
end
if changed == 1 then
  publish(S, {type = 'host_draining', host_id = hostId, draining = drain, at = now})
end
return {0, changed}
