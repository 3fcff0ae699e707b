--[[
  Revoke a host's credential: it fails from its next request, on every process, the host's devices
  leave the pool and the assignments it had not claimed go back to the queue. Its running leases
  can no longer be renewed (every host script refuses a revoked credential), so they expire and
  requeue through the reaper. Revocation is bound to the credential, not the host id: a static
  host whose token is changed in configuration works again with the new token.

  Input:
    KEYS[1]     tasks: names the deployment's slot; every key the script touches is
                derived from the key base, ARGV[3] (includes/deployment.lua)
    ARGV[1..5]  the deployment's settings (includes/deployment.lua)
    ARGV[6]     host id
    ARGV[7]     a static host's configured token digest (it may have no record yet), "" for an
                enrolled host (its record holds the digest)
    ARGV[8]     actor: the operator's name, on every event of this step
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
setActor(S, ARGV[8])
local hostsKey = S.key.hosts
local revokedKey = S.key.revoked_tokens
local hostTokensKey = S.key.host_tokens
local hostId = ARGV[6]
local staticDigest = ARGV[7]

local now = nowMs()
local host = getJson(hostsKey, hostId)
local newly
if staticDigest ~= '' then
  host = host or {kind = 'static', created_at = now}
  newly = rcall('SADD', revokedKey, staticDigest) == 1
elseif not host then
  return {E.NOT_FOUND}
else
  newly = rcall('SADD', revokedKey, host.token_digest) == 1
  rcall('HDEL', hostTokensKey, host.token_digest)
  if not host.revoked then
    host.revoked = true
    host.revoked_at = now
    putJson(hostsKey, hostId, host)
  end
end
detachHost(S, hostId, now, 'host_revoked', true)
rcall('HDEL', S.key.host_snapshots, hostId)
if newly then
  publish(S, {type = 'host_revoked', host_id = hostId, at = now})
end
return {0, cjson.encode(host)}
