--[[
  Revoke an operator token: every process refuses it from its next request (each request reads
  the token through readOperatorToken, which no longer finds it).

  Input:
    KEYS[1] operator_tokens        hash   token id -> token JSON
    KEYS[2] operator_token_hashes  hash   SHA-256 of the secret -> token id (live tokens only)
    KEYS[3] operator_tokens_live   zset   token id -> expires_at (ms), of tokens not revoked
    KEYS[4] feed                   stream the deployment's events
    ARGV[1] token id
    ARGV[2] actor: the operator's name, on the `operator_token_revoked` event
    ARGV[3] actor id: its token's id ("admin" for the bootstrap token), on the same event
    ARGV[4] key base, which `teams`, `team_names` and `team_usage:<team>` are derived from: a
            token's team has one token less, and is forgotten if nothing else names it
            (includes/teams.lua, unnameTeam)
  Output:
    {0, token JSON}
    {NOT_FOUND}

  Invariant: revocation is final and idempotent (a repeat publishes nothing); a revoked token's
  digest no longer leads to it, and it no longer counts against the limit of live tokens.
]]
--- @include "includes/common"
--- @include "includes/tokens"
--- @include "includes/teams"
local tokensKey, hashesKey, liveKey, feedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

return revokeToken(tokensKey, ARGV[1], function(token, now)
  rcall('HDEL', hashesKey, token.digest)
  rcall('ZREM', liveKey, token.id)
  if token.team then
    unnameTeam({base = ARGV[4], key = fixedKeys(ARGV[4])}, token.team, 'tokens')
  end
  publishTo(feedKey, {type = 'operator_token_revoked', token_id = token.id, name = token.name, at = now},
            ARGV[2], ARGV[3])
end)
