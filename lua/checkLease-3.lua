--[[
  Whether a host's lease is current, checked as a renewal checks it, without renewing it: what an
  artifact upload asks before it streams any byte, so that a lease already ended or replaced is
  refused at once rather than after its bytes reached the blob store. (lua/recordArtifact checks
  again as it writes: the lease may end while the bytes stream.)

  Input:
    KEYS[1] tasks            hash  task id -> task JSON
    KEYS[2] lease_deadlines  zset  task id -> its running lease's expiry (ms)
    KEYS[3] revoked_tokens   set   SHA-256 digests of revoked host tokens
    ARGV[1] host id
    ARGV[2] lease id
    ARGV[3] task id
    ARGV[4] attempt
    ARGV[5] SHA-256 of the credential the request came with
  Output:
    {0}
    {LEASE_NOT_OWNED} | {LEASE_REPLACED} | {LEASE_EXPIRED} | {REVOKED}  as a renewal answers

  Invariant: reads only.
]]
--- @flags no-writes
--- @include "includes/common"
local _, lease, failure = requestLease(KEYS, ARGV, nowMs())
if not lease then
  return {failure}
end
return {0}
