--[[
  Reaper: go on placing the waiting work of a team whose placement stopped at a step's bound
  (includes/placement.lua, placeTeamWork): one slice of one team a call, so no call holds Redis
  for longer than a slice.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
  The index this sweep reads: placing_teams (team -> the target where its placement resumes).
  Output:
    {0, 1 when it served a team, else 0}

  Cost: one slice, at most TEAM_TARGETS_PER_STEP of the team's targets read.
  Invariant: a team leaves placing_teams once a slice ends with the team at its quota or each of
  its targets read (a device freed meanwhile fed itself by the order, so nothing read before the
  slice's offset needs reading again); otherwise it stays, with the offset to resume at.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/placement"
local S = deployment(KEYS, ARGV)

local resume = rcall('ZRANGE', S.key.placing_teams, 0, 0, 'WITHSCORES')
if #resume == 0 then
  return {0, 0}
end
placeTeamWork(S, resume[1], nowMs(), tonumber(resume[2]))
return {0, 1}
