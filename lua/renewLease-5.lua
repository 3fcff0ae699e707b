--[[
  Renew a running lease and store the latest progress with it.

  Input:
    KEYS[1] tasks            hash  task id -> task JSON
    KEYS[2] lease_deadlines  zset  task id -> its running lease's expiry (ms)
    KEYS[3] revoked_tokens   set   SHA-256 digests of revoked host tokens
    KEYS[4] progress         hash  task id -> latest progress JSON of its running attempt
    KEYS[5] feed             stream the deployment's live feed
    ARGV[1] host id
    ARGV[2] lease id
    ARGV[3] task id
    ARGV[4] attempt
    ARGV[5] SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[6] key base: the deployment's prefix and ':' (`tether:{default}:`), which the task's
            lease key is derived from, as every script derives it (includes/deployment.lua)
    ARGV[7] lease TTL (ms)
    ARGV[8] progress JSON to store, or "" to leave the stored progress as it is
  Keys it derives:
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
--- @include "includes/renewal"
if credentialRevoked(KEYS[3], ARGV[5]) then
  return {E.REVOKED}
end
local R = {tasks = KEYS[1], deadlines = KEYS[2], progress = KEYS[4], feed = KEYS[5], base = ARGV[6],
           ttl = tonumber(ARGV[7])}
return renewOne(R, ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[8], nowMs())
