--[[
  Record that an operator token was used: at most one write per interval per token, whichever
  processes see it used.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] token id
    ARGV[7] the interval (ms): last_used_at is written only if it is older than this
  Keys it touches:
    operator_tokens  hash  token id -> token JSON
  Output:
    {0, 1}  written
    {0, 0}  not due (another process wrote it meanwhile), or no such token

  Invariant: last_used_at only moves forward.
]]
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local token = getJson(S.key.operator_tokens, ARGV[6])
if not token then
  return {0, 0}
end
local now = nowMs()
if token.last_used_at and now - token.last_used_at < tonumber(ARGV[7]) then
  return {0, 0}
end
token.last_used_at = now
putJson(S.key.operator_tokens, token.id, token)
return {0, 1}
