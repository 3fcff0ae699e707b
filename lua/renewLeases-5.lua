--[[
  Renew several leases of one host at once, each with its progress: a rack of phones costs one
  request and one step per renewal interval, not one per phone.

  Input:
    KEYS[1] tasks            hash  task id -> task JSON
    KEYS[2] lease_deadlines  zset  task id -> its running lease's expiry (ms)
    KEYS[3] revoked_tokens   set   SHA-256 digests of revoked host tokens
    KEYS[4] progress         hash  task id -> latest progress JSON of its running attempt
    KEYS[5] feed             stream the deployment's live feed
    ARGV[1] host id
    ARGV[2] SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[3] key base: the deployment's prefix and ':' (`tether:{default}:`), which each task's
            lease key is derived from, as every script derives it (includes/deployment.lua)
    ARGV[4] lease TTL (ms)
    ARGV[5..] the leases, four arguments each: lease id, task id, attempt, progress JSON ("" to
            leave the stored progress as it is)
  Keys it derives:
    lease:<task id>  string the live lease {lease_id, host_id, attempt, progress?}, its TTL the time left
  Output:
    {0, {answer, ...}}  one answer per lease, in the order given, each as a single renewal
                        answers (lua/renewLease): {0, new expiry (ms), cancel requested (0|1)}
                        or {LEASE_NOT_OWNED} | {LEASE_EXPIRED} | {LEASE_REPLACED}
    {REVOKED}           the credential is revoked: nothing renewed

  Invariant: each lease is judged exactly as a single renewal judges it (includes/renewal.lua), at
  one instant, and one lease's refusal changes nothing of it and fails none of the others.
]]
--- @include "includes/common"
--- @include "includes/renewal"
if credentialRevoked(KEYS[3], ARGV[2]) then
  return {E.REVOKED}
end
local R = {tasks = KEYS[1], deadlines = KEYS[2], progress = KEYS[4], feed = KEYS[5], base = ARGV[3],
           ttl = tonumber(ARGV[4])}
local hostId, now = ARGV[1], nowMs()
local answers = {}
for i = 5, #ARGV - 3, 4 do
  answers[#answers + 1] = renewOne(R, hostId, ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], now)
end
return {0, answers}
