--[[
  Renew several leases of one host at once, each with its progress: a rack of phones costs one
  request and one step per renewal interval, not one per phone.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] host id
    ARGV[7] SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[8] lease TTL (ms)
    ARGV[9..] the leases, four arguments each: lease id, task id, attempt, progress JSON ("" to
            leave the stored progress as it is)
  Keys it touches:
    tasks            hash  task id -> task JSON
    lease_deadlines  zset  task id -> its running lease's expiry (ms)
    revoked_tokens   set   SHA-256 digests of revoked host tokens
    progress         hash  task id -> latest progress JSON of its running attempt
    feed             stream the deployment's live feed
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
--- @include "includes/deployment"
--- @include "includes/renewal"
local S = deployment(KEYS, ARGV)
if credentialRevoked(S.key.revoked_tokens, ARGV[7]) then
  return {E.REVOKED}
end
local hostId, ttl, now = ARGV[6], tonumber(ARGV[8]), nowMs()
local answers = {}
for i = 9, #ARGV - 3, 4 do
  answers[#answers + 1] = renewOne(S, ttl, hostId, ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], now)
end
return {0, answers}
