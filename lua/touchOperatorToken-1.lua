--[[
  Record that an operator token was used: at most one write per interval per token, whichever
  processes see it used.

  Input:
    KEYS[1] operator_tokens  hash  token id -> token JSON
    ARGV[1] token id
    ARGV[2] the interval (ms): last_used_at is written only if it is older than this
  Output:
    {0, 1}  written
    {0, 0}  not due (another process wrote it meanwhile), or no such token

  Invariant: last_used_at only moves forward.
]]
--- @include "includes/common"
local token = getJson(KEYS[1], ARGV[1])
if not token then
  return {0, 0}
end
local now = nowMs()
if token.last_used_at and now - token.last_used_at < tonumber(ARGV[2]) then
  return {0, 0}
end
token.last_used_at = now
putJson(KEYS[1], token.id, token)
return {0, 1}
