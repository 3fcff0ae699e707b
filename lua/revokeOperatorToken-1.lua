--[[
  Revoke an operator token: every process refuses it from its next request (each request reads
  the token through readOperatorToken, which no longer finds it).

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] token id
    ARGV[7] actor: the operator's name, on the `operator_token_revoked` event
    ARGV[8] actor id: its token's id ("admin" for the bootstrap token), on the same event
  Keys it touches:
    operator_tokens        hash   token id -> token JSON
    operator_token_hashes  hash   SHA-256 of the secret -> token id (live tokens only)
    operator_tokens_live   zset   token id -> expires_at (ms), of tokens not revoked
    feed                   stream the deployment's events
    teams, team_names, team_usage:<team>  a token's team has one token less, and is forgotten
                           if nothing else names it (includes/teams.lua, unnameTeam)
  Output:
    {0, token JSON}
    {NOT_FOUND}

  Invariant: revocation is final and idempotent (a repeat publishes nothing); a revoked token's
  digest no longer leads to it, and it no longer counts against the limit of live tokens.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/tokens"
--- @include "includes/teams"
local S = deployment(KEYS, ARGV)
local tokensKey, hashesKey = S.key.operator_tokens, S.key.operator_token_hashes
local liveKey, feedKey = S.key.operator_tokens_live, S.key.feed

return revokeToken(tokensKey, ARGV[6], function(token, now)
  rcall('HDEL', hashesKey, token.digest)
  rcall('ZREM', liveKey, token.id)
  if token.team then
    unnameTeam(S, token.team, 'tokens')
  end
  publishTo(feedKey, {type = 'operator_token_revoked', token_id = token.id, name = token.name, at = now},
            ARGV[7], ARGV[8])
end)
