--[[
  Upgrade: a team's device time is kept by the minute. Earlier versions kept `team_usage:<team>`
  as field minute % 60 -> "<minute>:<ms>"; now it is field minute -> ms (includes/teams.lua), so
  the scripts every result and every teams read run parse one form. Each earlier field is added
  to its minute's and deleted. A batch of teams per call: the walk goes through `team_names` in
  lex order (includes/upgrades.lua, walkLex), after upgradeTeamNames has named every team, and
  the call that ends it marks the upgrade done, after which a call costs one read.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] at most this many teams per call
  Keys it touches:
    team_names         zset  every team not forgotten (score 0, lex)
    team_usage:<team>  hash  minute -> ms (or, earlier, minute % 60 -> "<minute>:<ms>"): an hour
                             of fields at most
    upgrades           hash  upgrade name -> the cursor of its walk under way, or "done"
  Output:
    {0, teams walked, 1 when the upgrade is done}

  Invariant: a team's device time within the last hour is the same before and after its fields
  are moved (each earlier field is added to its minute's in the step that deletes it); the walk
  runs before a process of this version serves.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/upgrades"
local S = deployment(KEYS, ARGV)
local walked, done = walkLex(S, 'team_usage', S.key.team_names, tonumber(ARGV[6]), function(team)
  local usageKey = derived(S, 'team_usage', team)
  local fields = rcall('HGETALL', usageKey)
  for i = 1, #fields, 2 do
    local minute, ms = string.match(fields[i + 1], '^(%d+):(%d+)$')
    if minute then
      rcall('HDEL', usageKey, fields[i])
      rcall('HINCRBY', usageKey, minute, ms)
    end
  end
end)
return {0, walked, done and 1 or 0}
