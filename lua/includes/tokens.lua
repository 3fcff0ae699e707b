--[[
  Operator and enrollment tokens: records in a hash (token id -> token JSON), each kept after it
  is revoked, for listing and audit.

  Functions:
    revokeToken(tokensKey, tokenId, onRevoked)  mark a token revoked, once; the script's reply

  Invariant kept: revocation is final and idempotent: a token revoked again keeps its first
  `revoked_at`, and the caller learns it changed nothing (so it publishes nothing).
]]
--- @include "includes/common"

-- Revoke a token, once, and answer as a revoke script does: {0, token JSON}, or {NOT_FOUND} when
-- there is no such token. `onRevoked(token, now)` runs only when this call revoked it (the
-- script's own indexes and its event); a repeat leaves the record as it was and runs nothing.
local function revokeToken(tokensKey, tokenId, onRevoked)
  local token = getJson(tokensKey, tokenId)
  if not token then
    return {E.NOT_FOUND}
  end
  if not token.revoked then
    local now = nowMs()
    token.revoked = true
    token.revoked_at = now
    putJson(tokensKey, token.id, token)
    onRevoked(token, now)
  end
  return {0, cjson.encode(token)}
end
