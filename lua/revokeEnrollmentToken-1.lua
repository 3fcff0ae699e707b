--[[
  Revoke an enrollment token: no new host may enroll with it. Hosts that already enrolled keep
  their own credentials, and the identical retry of a completed enrollment still answers.

  Input:
    KEYS[1] enrollment_tokens  hash  token id -> token JSON
    ARGV[1] token id
  Output:
    {0, token JSON}
    {NOT_FOUND}

  Invariant: revocation is final and idempotent.
]]
--- @include "includes/common"
local tokensKey = KEYS[1]

local token = getJson(tokensKey, ARGV[1])
if not token then
  return {E.NOT_FOUND}
end
if not token.revoked then
  token.revoked = true
  token.revoked_at = nowMs()
  putJson(tokensKey, token.id, token)
end
return {0, cjson.encode(token)}
