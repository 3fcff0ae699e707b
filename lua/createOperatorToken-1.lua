--[[
  Store a new operator token: only the SHA-256 of its secret is kept.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] token id
    ARGV[7] SHA-256 of the secret (hex)
    ARGV[8] name
    ARGV[9] scopes, a JSON array of scope names
    ARGV[10] lifetime (ms)
    ARGV[11] at most this many live tokens (COORDINATOR_MAX_OPERATOR_TOKENS)
    ARGV[12] actor: the operator's name, on the `operator_token_created` event
    ARGV[13] actor id: its token's id ("admin" for the bootstrap token), on the same event
    ARGV[14] team: every task the token creates belongs to it; "" for none (the creator chooses)
  Keys it touches:
    operator_tokens         hash   token id -> {digest, name, scopes, created_at,
                                   expires_at, last_used_at, created_by, revoked}
    operator_token_hashes   hash   SHA-256 of the secret -> token id (live tokens only)
    operator_tokens_by_age  zset   token id -> creation order (its creation time in ms,
                                   nudged past the newest), for listing in order
    operator_tokens_live    zset   token id -> expires_at (ms), of tokens not revoked
    feed                    stream the deployment's events
    teams                   hash   the teams (lua/includes/teams.lua): a token's team is
                                   named (one more token), so it is listed while the token
                                   is not revoked
  Output:
    {0, token JSON}
    {TOKEN_LIMIT}  as many live tokens as allowed exist already; nothing changed

  Invariants: never more live (unrevoked, unexpired) tokens than ARGV[11], whichever process
  creates them; expiry is on the Redis clock; the feed names who created it, never its secret.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/teams"
local S = deployment(KEYS, ARGV)
local tokensKey, hashesKey = S.key.operator_tokens, S.key.operator_token_hashes
local byAgeKey, liveKey, feedKey = S.key.operator_tokens_by_age, S.key.operator_tokens_live, S.key.feed

local now = nowMs()
-- Expired tokens no longer count (their records stay, for the listing and the audit).
rcall('ZREMRANGEBYSCORE', liveKey, '-inf', now)
if rcall('ZCARD', liveKey) >= tonumber(ARGV[11]) then
  return {E.TOKEN_LIMIT}
end
local token = {
  id = ARGV[6],
  digest = ARGV[7],
  name = ARGV[8],
  scopes = cjson.decode(ARGV[9]),
  created_at = now,
  expires_at = now + tonumber(ARGV[10]),
  created_by = ARGV[12],
  revoked = false,
}
if ARGV[14] ~= '' then
  token.team = ARGV[14]
  nameTeam(S, token.team, 'tokens', 1)
end
putJson(tokensKey, token.id, token)
rcall('HSET', hashesKey, token.digest, token.id)
rcall('ZADD', liveKey, token.expires_at, token.id)
local newest = rcall('ZREVRANGE', byAgeKey, 0, 0, 'WITHSCORES')[2]
rcall('ZADD', byAgeKey, math.max(now, newest and tonumber(newest) + 1 or now), token.id)
publishTo(feedKey, {type = 'operator_token_created', token_id = token.id, name = token.name,
                    scopes = token.scopes, team = token.team, at = now}, ARGV[12], ARGV[13])
return {0, cjson.encode(token)}
