--[[
  Store a new enrollment token: only the SHA-256 of its secret is kept.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] token id
    ARGV[7] SHA-256 of the secret (hex)
    ARGV[8] lifetime (ms)
    ARGV[9] max uses
    ARGV[10] labels JSON given to every host that enrolls with it
    ARGV[11] actor: the operator's name, on the `enrollment_token_created` event
    ARGV[12] actor id: its token's id ("admin" for the bootstrap token), on the same event
  Keys it touches:
    enrollment_tokens        hash  token id -> {digest, created_at, expires_at, max_uses,
                                    uses, labels (JSON string), revoked}
    enrollment_token_hashes  hash  SHA-256 of the secret -> token id
    enrollment_tokens_by_age zset  token id -> creation order (its creation time in ms,
                                    nudged past the newest), for listing in order
    feed                     stream the deployment's events
  Output:
    {0, token JSON}

  Invariants: a token's expiry is on the Redis clock, like every other deadline; the listing
  order is the creation order, also for tokens made within the same millisecond; the feed
  names who created it (never its secret or digest).
]]
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local tokensKey, hashesKey = S.key.enrollment_tokens, S.key.enrollment_token_hashes
local byAgeKey, feedKey = S.key.enrollment_tokens_by_age, S.key.feed

local now = nowMs()
local token = {
  id = ARGV[6],
  digest = ARGV[7],
  created_at = now,
  expires_at = now + tonumber(ARGV[8]),
  max_uses = tonumber(ARGV[9]),
  uses = 0,
  labels = ARGV[10],
  revoked = false,
}
putJson(tokensKey, token.id, token)
rcall('HSET', hashesKey, token.digest, token.id)
local newest = rcall('ZREVRANGE', byAgeKey, 0, 0, 'WITHSCORES')[2]
rcall('ZADD', byAgeKey, math.max(now, newest and tonumber(newest) + 1 or now), token.id)
publishTo(feedKey, {type = 'enrollment_token_created', token_id = token.id, at = now}, ARGV[11],
          ARGV[12])
return {0, cjson.encode(token)}
