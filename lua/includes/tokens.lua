--[[
  Operator and enrollment tokens: records in a hash (token id -> token JSON), each kept after it
  is revoked, for listing and audit.

  Functions:
    revokeToken(tokensKey, tokenId)  mark a token revoked, once

  Invariant kept: revocation is final and idempotent: a token revoked again keeps its first
  `revoked_at`, and the caller learns it changed nothing (so it publishes nothing).
]]
--- @include "includes/common"

-- Mark the token revoked: its record, or nil when there is none, and the time it was revoked now,
-- or nil when it already was (the record is then left as it was).
local function revokeToken(tokensKey, tokenId)
  local token = getJson(tokensKey, tokenId)
  if not token or token.revoked then
    return token, nil
  end
  local now = nowMs()
  token.revoked = true
  token.revoked_at = now
  putJson(tokensKey, token.id, token)
  return token, now
end
