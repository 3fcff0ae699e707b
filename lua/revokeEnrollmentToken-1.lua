--[[
  Revoke an enrollment token: no new host may enroll with it. Hosts that already enrolled keep
  their own credentials, and the identical retry of a completed enrollment still answers.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] token id
    ARGV[7..8] the actor on the `enrollment_token_revoked` event: the operator's name, its token's
            id ("admin" for the bootstrap token)
  Keys it touches:
    enrollment_tokens  hash   token id -> token JSON
    feed               stream the deployment's events
  Output: {0, token JSON}, or {NOT_FOUND}

  Invariant: revocation is final and idempotent (a repeat publishes nothing).
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/tokens"
local S = deployment(KEYS, ARGV)
local tokensKey = S.key.enrollment_tokens
local feedKey = S.key.feed

return revokeToken(tokensKey, ARGV[6], function(token, now)
  publishTo(feedKey, {type = 'enrollment_token_revoked', token_id = token.id, at = now}, ARGV[7],
            ARGV[8])
end)
