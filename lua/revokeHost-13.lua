--[[
  Revoke a host: its credential fails from its next request, its devices leave the pool and the
  assignments it had not claimed go back to the queue. Its running leases can no longer be renewed
  (every host script refuses a revoked host), so they expire and requeue through the reaper.

  Input:
    KEYS[1..9]  the scheduling keys (includes/schedule.lua)
    KEYS[10]    hosts           hash  host id -> host record JSON
    KEYS[11]    host_snapshots  hash  host id -> last accepted snapshot JSON
    KEYS[12]    revoked_hosts   set   host ids whose credentials were revoked
    KEYS[13]    host_tokens     hash  SHA-256 of a host token -> host id
    ARGV[1..2]  the scheduling arguments
    ARGV[3]     host id
    ARGV[4]     "static" when the host is configured statically and may have no record yet
  Output:
    {0, host record JSON}
    {NOT_FOUND}

  Invariant: revocation is final and idempotent; enrollment records stay (for audit) but no
  longer authenticate.
]]
--- @include "includes/common"
--- @include "includes/schedule"
local hostsKey = KEYS[10]
local snapshotsKey = KEYS[11]
local revokedKey = KEYS[12]
local hostTokensKey = KEYS[13]
local hostId = ARGV[3]

local now = nowMs()
local host = getJson(hostsKey, hostId)
if not host then
  if ARGV[4] ~= 'static' then
    return {E.NOT_FOUND}
  end
  host = {kind = 'static', created_at = now}
end
rcall('SADD', revokedKey, hostId)
if not host.revoked then
  host.revoked = true
  host.revoked_at = now
  putJson(hostsKey, hostId, host)
end
if host.token_digest then
  rcall('HDEL', hostTokensKey, host.token_digest)
end
detachHost(hostId, getJson(snapshotsKey, hostId), now, true)
rcall('HDEL', snapshotsKey, hostId)
return {0, cjson.encode(host)}
