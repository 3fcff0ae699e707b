--[[
  Revoke a host's credential: it fails from its next request, on every process, the host's devices
  leave the pool and the assignments it had not claimed go back to the queue. Its running leases
  can no longer be renewed (every host script refuses a revoked credential), so they expire and
  requeue through the reaper. Revocation is bound to the credential, not the host id: a static
  host whose token is changed in configuration works again with the new token.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     host id
    ARGV[7]     a static host's configured token digest (it may have no record yet), "" for an
                enrolled host (its record holds the digest)
    ARGV[8]     actor: the operator's name, on every event of this step
    ARGV[9]     actor id: its token's id ("admin" for the bootstrap token), on the same events
  Keys it touches besides those of its includes:
    hosts           hash  host id -> host record JSON
    revoked_tokens  set   SHA-256 digests of revoked host tokens
    host_tokens     hash  SHA-256 of a host token -> host id
  Output:
    {0, host record JSON}
    {NOT_FOUND}

  Invariant: revocation of a credential is final and idempotent; enrollment records stay (for
  audit) but no longer authenticate.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/hosts"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[8], ARGV[9])
local hostId = ARGV[6]
local staticDigest = ARGV[7]

local now = nowMs()
local host = getJson(S.key.hosts, hostId)
local newly
if staticDigest ~= '' then
  host = host or {kind = 'static', created_at = now}
  newly = rcall('SADD', S.key.revoked_tokens, staticDigest) == 1
elseif not host then
  return {E.NOT_FOUND}
else
  newly = rcall('SADD', S.key.revoked_tokens, host.token_digest) == 1
  rcall('HDEL', S.key.host_tokens, host.token_digest)
  if not host.revoked then
    host.revoked = true
    host.revoked_at = now
    putJson(S.key.hosts, hostId, host)
  end
end
detachHost(S, hostId, now, 'host_revoked', true)
rcall('HDEL', S.key.host_snapshots, hostId)
if newly then
  publish(S, {type = 'host_revoked', host_id = hostId, at = now})
end
return {0, cjson.encode(host)}
