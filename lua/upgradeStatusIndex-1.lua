--[[
  Upgrade: rewrite tasks_by_status entries of the earlier layout into the current one.

  The earlier layout kept every entry at score 0 as a member "status\0seq\0task id", ordered by
  lexicographic range; now each task id is scored by its status and age (statusScore,
  includes/common.lua), which no entry of the earlier layout can have (every score is at least
  2^48). Each reaper pass converts what is left of the earlier layout, so a deployment upgrades
  itself on its first pass and the listing misses its older tasks only until then.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] at most this many entries per call
  Keys it touches:
    tasks_by_status  zset  task id -> its status and age
  Output:
    {0, number of entries converted}

  Invariant: each task keeps exactly one entry, in the range of the status it had.
]]
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local byStatusKey = S.key.tasks_by_status
local limit = tonumber(ARGV[6])

local earlier = rcall('ZRANGEBYSCORE', byStatusKey, 0, 0, 'LIMIT', 0, limit)
for _, member in ipairs(earlier) do
  local status, seq, taskId = unpack(splitMember(member))
  rcall('ZREM', byStatusKey, member)
  if taskId and STATUS_CODES[status] then
    rcall('ZADD', byStatusKey, statusScore(status, tonumber(seq)), taskId)
  end
end
return {0, #earlier}
