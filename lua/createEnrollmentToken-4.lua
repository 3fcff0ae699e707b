--[[
  Store a new enrollment token: only the SHA-256 of its secret is kept.

  Input:
    KEYS[1] enrollment_tokens        hash  token id -> {digest, created_at, expires_at, max_uses,
                                            uses, labels (JSON string), revoked}
    KEYS[2] enrollment_token_hashes  hash  SHA-256 of the secret -> token id
    KEYS[3] enrollment_tokens_by_age zset  token id -> creation order (its creation time in ms,
                                            nudged past the newest), for listing in order
    KEYS[4] feed                     stream the deployment's events
    ARGV[1] token id
    ARGV[2] SHA-256 of the secret (hex)
    ARGV[3] lifetime (ms)
    ARGV[4] max uses
    ARGV[5] labels JSON given to every host that enrolls with it
    ARGV[6] actor: the operator's name, on the `enrollment_token_created` event
    ARGV[7] actor id: its token's id ("admin" for the bootstrap token), on the same event
  Output:
    {0, token JSON}

  Invariants: a token's expiry is on the Redis clock, like every other deadline; the listing
  order is the creation order, also for tokens made within the same millisecond; the feed
  names who created it (never its secret or digest).
]]
--- @include "includes/common"
local tokensKey, hashesKey, byAgeKey, feedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local now = nowMs()
local token = {
  id = ARGV[1],
  digest = ARGV[2],
  created_at = now,
  expires_at = now + tonumber(ARGV[3]),
  max_uses = tonumber(ARGV[4]),
  uses = 0,
  labels = ARGV[5],
  revoked = false,
}
putJson(tokensKey, token.id, token)
rcall('HSET', hashesKey, token.digest, token.id)
local newest = rcall('ZREVRANGE', byAgeKey, 0, 0, 'WITHSCORES')[2]
rcall('ZADD', byAgeKey, math.max(now, newest and tonumber(newest) + 1 or now), token.id)
publishTo(feedKey, {type = 'enrollment_token_created', token_id = token.id, at = now}, ARGV[6],
          ARGV[7])
return {0, cjson.encode(token)}
