--[[
  Enroll a managed host: consume one use of a valid enrollment token and create the host, bound to
  the digest of the host token the agent generated, in one step.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] SHA-256 of the presented enrollment token
    ARGV[7] enrollment id (agent-generated)
    ARGV[8] SHA-256 of the agent's host token
    ARGV[9] host id to mint if this is a new enrollment
    ARGV[10] hostname ("" if none)
    ARGV[11] labels JSON the agent asked for
  Keys it touches:
    enrollment_token_hashes  hash  SHA-256 of an enrollment secret -> token id
    enrollment_tokens        hash  token id -> token JSON
    enrollments              hash  enrollment id -> {host_id, host_token_digest, token_id}
    hosts                    hash  host id -> host record JSON
    host_tokens              hash  SHA-256 of a host token -> host id
    revoked_tokens           set   SHA-256 digests of revoked host tokens
    host_ids                 zset  every host id with a record (score 0, lexicographic)
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
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local hashesKey, tokensKey = S.key.enrollment_token_hashes, S.key.enrollment_tokens
local enrollmentsKey, hostsKey = S.key.enrollments, S.key.hosts
local hostTokensKey, revokedKey, hostIdsKey = S.key.host_tokens, S.key.revoked_tokens, S.key.host_ids
local enrollmentId = ARGV[7]
local hostTokenDigest = ARGV[8]

local tokenId = rcall('HGET', hashesKey, ARGV[6])
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
local labels = cjson.decode(ARGV[11])
for name, value in pairs(cjson.decode(token.labels)) do
  labels[name] = value
end
local labelsJson = '{}'
if next(labels) ~= nil then
  labelsJson = cjson.encode(labels)
end

local hostId = ARGV[9]
putJson(hostsKey, hostId, {
  kind = 'enrolled',
  created_at = now,
  token_id = tokenId,
  enrollment_id = enrollmentId,
  token_digest = hostTokenDigest,
  hostname = ARGV[10],
  labels = labelsJson,
})
rcall('ZADD', hostIdsKey, 0, hostId)
rcall('HSET', hostTokensKey, hostTokenDigest, hostId)
putJson(enrollmentsKey, enrollmentId, {host_id = hostId, host_token_digest = hostTokenDigest, token_id = tokenId})
return {0, hostId, 1}
