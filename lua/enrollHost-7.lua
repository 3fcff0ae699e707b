--[[
  Enroll a managed host: consume one use of a valid enrollment token and create the host, bound to
  the digest of the host token the agent generated, in one step.

  Input:
    KEYS[1] enrollment_token_hashes  hash  SHA-256 of an enrollment secret -> token id
    KEYS[2] enrollment_tokens        hash  token id -> token JSON
    KEYS[3] enrollments              hash  enrollment id -> {host_id, host_token_digest, token_id}
    KEYS[4] hosts                    hash  host id -> host record JSON
    KEYS[5] host_tokens              hash  SHA-256 of a host token -> host id
    KEYS[6] revoked_tokens           set   SHA-256 digests of revoked host tokens
    KEYS[7] host_ids                 zset  every host id with a record (score 0, lexicographic)
    ARGV[1] SHA-256 of the presented enrollment token
    ARGV[2] enrollment id (agent-generated)
    ARGV[3] SHA-256 of the agent's host token
    ARGV[4] host id to mint if this is a new enrollment
    ARGV[5] hostname ("" if none)
    ARGV[6] labels JSON the agent asked for
  Output:
    {0, host id, 1}         created now
    {0, host id, 0}         the identical request was completed before (even if the token is
                            used up, expired or revoked since)
    {ENROLLMENT_INVALID}    unknown, expired, revoked or used-up token (the service answers 401)
    {ENROLLMENT_CONFLICT}   this enrollment id was completed with another host token or token,
                            or this host token already belongs to another host
    {REVOKED}               the identical retry of an enrollment whose host was revoked

  Invariants: a token is never used more than max_uses times (use counted in the step that creates
  the host); one enrollment id maps to one host for ever; a host token maps to one host.
]]
--- @include "includes/common"
local hashesKey, tokensKey, enrollmentsKey, hostsKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hostTokensKey, revokedKey, hostIdsKey = KEYS[5], KEYS[6], KEYS[7]
local enrollmentId = ARGV[2]
local hostTokenDigest = ARGV[3]

local tokenId = rcall('HGET', hashesKey, ARGV[1])
if not tokenId then
  return {E.ENROLLMENT_INVALID}
end

local earlier = getJson(enrollmentsKey, enrollmentId)
if earlier then
  if earlier.host_token_digest ~= hostTokenDigest or earlier.token_id ~= tokenId then
    return {E.ENROLLMENT_CONFLICT}
  end
  if credentialRevoked(revokedKey, hostTokenDigest) then
    return {E.REVOKED}
  end
  return {0, earlier.host_id, 0}
end

local now = nowMs()
local token = getJson(tokensKey, tokenId)
if token.revoked or now >= token.expires_at or token.uses >= token.max_uses then
  return {E.ENROLLMENT_INVALID}
end
if rcall('HEXISTS', hostTokensKey, hostTokenDigest) == 1 then
  return {E.ENROLLMENT_CONFLICT}
end

token.uses = token.uses + 1
putJson(tokensKey, tokenId, token)

-- The operator's labels (from the token) win over the ones the agent asked for.
local labels = cjson.decode(ARGV[6])
for name, value in pairs(cjson.decode(token.labels)) do
  labels[name] = value
end
local labelsJson = '{}'
if next(labels) ~= nil then
  labelsJson = cjson.encode(labels)
end

local hostId = ARGV[4]
putJson(hostsKey, hostId, {
  kind = 'enrolled',
  created_at = now,
  token_id = tokenId,
  enrollment_id = enrollmentId,
  token_digest = hostTokenDigest,
  hostname = ARGV[5],
  labels = labelsJson,
})
rcall('ZADD', hostIdsKey, 0, hostId)
rcall('HSET', hostTokensKey, hostTokenDigest, hostId)
putJson(enrollmentsKey, enrollmentId, {host_id = hostId, host_token_digest = hostTokenDigest, token_id = tokenId})
return {0, hostId, 1}
