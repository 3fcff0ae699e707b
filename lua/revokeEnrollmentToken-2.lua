--[[
  Revoke an enrollment token: no new host may enroll with it. Hosts that already enrolled keep
  their own credentials, and the identical retry of a completed enrollment still answers.

  Input:
    KEYS[1] enrollment_tokens  hash   token id -> token JSON
    KEYS[2] feed               stream the deployment's events
    ARGV[1] token id
    ARGV[2] actor: the operator's name, on the `enrollment_token_revoked` event
    ARGV[3] actor id: its token's id ("admin" for the bootstrap token), on the same event
  Output: {0, token JSON}, or {NOT_FOUND}

  Invariant: revocation is final and idempotent (a repeat publishes nothing).
]]
--- @include "includes/common"
--- @include "includes/tokens"
local tokensKey = KEYS[1]
local feedKey = KEYS[2]

return revokeToken(tokensKey, ARGV[1], function(token, now)
  publishTo(feedKey, {type = 'enrollment_token_revoked', token_id = token.id, at = now}, ARGV[2],
            ARGV[3])
end)
