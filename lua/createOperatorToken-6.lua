--[[
  Store a new operator token: only the SHA-256 of its secret is kept.

  Input:
    KEYS[1] operator_tokens         hash   token id -> {digest, name, scopes, created_at,
                                           expires_at, last_used_at, created_by, revoked}
    KEYS[2] operator_token_hashes   hash   SHA-256 of the secret -> token id (live tokens only)
    KEYS[3] operator_tokens_by_age  zset   token id -> creation order (its creation time in ms,
                                           nudged past the newest), for listing in order
    KEYS[4] operator_tokens_live    zset   token id -> expires_at (ms), of tokens not revoked
    KEYS[5] feed                    stream the deployment's events
    KEYS[6] teams                   hash   the teams (lua/includes/teams.lua): a token's team is
                                           named (one more token), so it is listed while the token
                                           is not revoked
    ARGV[1] token id
    ARGV[2] SHA-256 of the secret (hex)
    ARGV[3] name
    ARGV[4] scopes, a JSON array of scope names
    ARGV[5] lifetime (ms)
    ARGV[6] at most this many live tokens (COORDINATOR_MAX_OPERATOR_TOKENS)
    ARGV[7] actor: the operator's name, on the `operator_token_created` event
    ARGV[8] actor id: its token's id ("admin" for the bootstrap token), on the same event
    ARGV[9] team: every task the token creates belongs to it; "" for none (the creator chooses)
    ARGV[10] key base, which `team_names` is derived from (includes/teams.lua, nameTeam)
  Output:
    {0, token JSON}
    {TOKEN_LIMIT}  as many live tokens as allowed exist already; nothing changed

  Invariants: never more live (unrevoked, unexpired) tokens than ARGV[6], whichever process
  creates them; expiry is on the Redis clock; the feed names who created it, never its secret.
]]
--- @include "includes/common"
--- @include "includes/teams"
local tokensKey, hashesKey, byAgeKey, liveKey, feedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- KEYS[6], teams, is reached as the key base names it, with team_names (includes/teams.lua).

local now = nowMs()
-- Expired tokens no longer count (their records stay, for the listing and the audit).
rcall('ZREMRANGEBYSCORE', liveKey, '-inf', now)
if rcall('ZCARD', liveKey) >= tonumber(ARGV[6]) then
  return {E.TOKEN_LIMIT}
end
local token = {
  id = ARGV[1],
  digest = ARGV[2],
  name = ARGV[3],
  scopes = cjson.decode(ARGV[4]),
  created_at = now,
  expires_at = now + tonumber(ARGV[5]),
  created_by = ARGV[7],
  revoked = false,
}
if ARGV[9] ~= '' then
  token.team = ARGV[9]
  nameTeam({base = ARGV[10], key = fixedKeys(ARGV[10])}, token.team, 'tokens', 1)
end
putJson(tokensKey, token.id, token)
rcall('HSET', hashesKey, token.digest, token.id)
rcall('ZADD', liveKey, token.expires_at, token.id)
local newest = rcall('ZREVRANGE', byAgeKey, 0, 0, 'WITHSCORES')[2]
rcall('ZADD', byAgeKey, math.max(now, newest and tonumber(newest) + 1 or now), token.id)
publishTo(feedKey, {type = 'operator_token_created', token_id = token.id, name = token.name,
                    scopes = token.scopes, team = token.team, at = now}, ARGV[7], ARGV[8])
return {0, cjson.encode(token)}
