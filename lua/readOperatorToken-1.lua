--[[
  The operator token a request presents, if it may be used now: read on every request that
  carries one, so a revocation or an expiry holds on every process from its next request.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] SHA-256 of the presented secret (hex)
  Keys it touches:
    operator_token_hashes  hash  SHA-256 of the secret -> token id (live tokens only)
    operator_tokens        hash  token id -> token JSON
  Output:
    {0, token JSON, now (ms)}  the caller decides whether last_used_at is due a touch
    {REVOKED}                  unknown, revoked or expired: the caller answers the uniform 401

  Invariant: reads only; expiry is judged on the Redis clock, like every other deadline.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local id = rcall('HGET', S.key.operator_token_hashes, ARGV[6])
local token = id and getJson(S.key.operator_tokens, id)
if not token or token.revoked then
  return {E.REVOKED}
end
local now = nowMs()
if now >= token.expires_at then
  return {E.REVOKED}
end
return {0, cjson.encode(token), now}
