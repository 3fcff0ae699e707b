--[[
  The operator token a request presents, if it may be used now: read on every request that
  carries one, so a revocation or an expiry holds on every process from its next request.

  Input:
    KEYS[1] operator_token_hashes  hash  SHA-256 of the secret -> token id (live tokens only)
    KEYS[2] operator_tokens        hash  token id -> token JSON
    ARGV[1] SHA-256 of the presented secret (hex)
  Output:
    {0, token JSON, now (ms)}  the caller decides whether last_used_at is due a touch
    {REVOKED}                  unknown, revoked or expired: the caller answers the uniform 401

  Invariant: reads only; expiry is judged on the Redis clock, like every other deadline.
]]
--- @flags no-writes
--- @include "includes/common"
local id = rcall('HGET', KEYS[1], ARGV[1])
local token = id and getJson(KEYS[2], id)
if not token or token.revoked then
  return {E.REVOKED}
end
local now = nowMs()
if now >= token.expires_at then
  return {E.REVOKED}
end
return {0, cjson.encode(token), now}
