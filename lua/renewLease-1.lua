--[[
  Renew a running lease and store the latest progress with it.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..10]  the lease the request presents: host id, lease id, task id, attempt, SHA-256 of the
                 credential it came with (includes/common.lua, requestLease)
    ARGV[11] lease TTL (ms)
    ARGV[12] progress JSON to store, or "" to leave the stored progress as it is
  Keys it touches:
    tasks, lease_deadlines, revoked_tokens  the lease's check (includes/renewal.lua, renewOne)
    progress         hash  task id -> latest progress JSON of its running attempt
    feed             stream the deployment's live feed
    lease:<task id>  string the live lease {lease_id, host_id, attempt, progress?}, its TTL the time left
  Output:
    {0, new expiry (ms), cancel requested (0|1)}
    {LEASE_NOT_OWNED} unknown lease, another host's, or not this task and attempt
    {LEASE_REPLACED}  a newer attempt of the task exists
    {LEASE_EXPIRED}   past its deadline, or ended by a result or by the reaper
    {REVOKED}

  Commands, a renewal whose step is news (bench/footprint.py, row 8a: 8 with the FCALL), each
  for a reason:
    SISMEMBER revoked_tokens  a revoked credential is refused atomically, on every route
    TIME              the lease's new deadline, on the clock every process agrees on
    HGET tasks        the record: which lease and attempt are current, cancel_requested
    SET lease:<task> XX GET PX   whether the lease is alive (its key, whose TTL is its time left and
                      which people read, is still there), its new TTL and its latest step, and the
                      step it held before, so whether this one is news: one command
                      (includes/common.lua, extendLease; a key missing asks its deadline; with no
                      progress sent, PEXPIRE)
    ZADD lease_deadlines    its new deadline, which the reaper acts on
    HSET progress, XADD feed  a changed step, stored apart from the record (no rewrite of it
                      every renewal) and published; a step that is not news runs neither

  Invariant: only the current, unexpired lease is ever extended (its deadline and its key's TTL
  together); a rejected renewal changes nothing, so a stale lease can never revive or alter the
  current attempt (includes/renewal.lua, which a host's batch of renewals shares).
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/renewal"
local S = deployment(KEYS, ARGV)
if credentialRevoked(S.key.revoked_tokens, ARGV[10]) then
  return {E.REVOKED}
end
return renewOne(S, tonumber(ARGV[11]), ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9]), ARGV[12], nowMs())
