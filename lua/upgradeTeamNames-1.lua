--[[
  Upgrade: the teams listing pages through `team_names`, and a team is forgotten when nothing names
  it (includes/teams.lua). Earlier versions kept neither the names nor the counts of a team's task
  records and tokens, so each team of `teams` is named in `team_names` and, unless its counts
  exist already, given LEGACY_TEAM_TASKS task records: a team named before the upgrade is kept, as
  it was then (its tasks were never counted, so nothing tells when the last of them goes). A batch
  of fields per call: the walk goes through `teams` with HSCAN from the cursor kept in `upgrades`,
  and the call that ends it marks the upgrade done, after which a call costs one read.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] about this many fields per call (HSCAN's COUNT)
  Keys it touches:
    teams     hash  "<team>", "<team>|running", ... (includes/teams.lua)
    upgrades  hash  upgrade name -> the cursor of its walk under way, or "done"
  Output:
    {0, fields walked, 1 when the upgrade is done}

  Invariant: every team of `teams` when the upgrade starts is in `team_names` before the upgrade is
  marked done; the walk runs before a process of this version serves, so every team named since
  was named by nameTeam, with its counts.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/teams"
--- @include "includes/upgrades"
local S = deployment(KEYS, ARGV)
local walked, done = walkHash(S, 'team_names', S.key.teams, tonumber(ARGV[6]), function(field)
  local team = string.match(field, '^([^|]+)')
  if team and rcall('ZSCORE', S.key.team_names, team) == false then
    rcall('ZADD', S.key.team_names, 0, team)
    rcall('HSETNX', S.key.teams, team .. '|tasks', LEGACY_TEAM_TASKS)
  end
end)
return {0, walked, done and 1 or 0}
