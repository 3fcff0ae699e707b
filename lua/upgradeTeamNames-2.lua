--[[
  Upgrade: the teams listing pages through `team_names`, and a team is forgotten when nothing names
  it (includes/teams.lua). Earlier versions kept neither the names nor the counts of a team's task
  records and tokens, so each team of `teams` is named in `team_names` and, unless its counts
  exist already, given LEGACY_TEAM_TASKS task records: a team named before the upgrade is kept, as
  it was then (its tasks were never counted, so nothing tells when the last of them goes). A batch
  of fields per call: the walk goes through `teams` with HSCAN from the cursor kept in `upgrades`,
  and the call that ends it marks the upgrade done, after which a call costs one read.

  Input:
    KEYS[1] teams     hash  "<team>", "<team>|running", ... (includes/teams.lua)
    KEYS[2] upgrades  hash  upgrade name -> the cursor of its walk under way, or "done"
    ARGV[1] key base: the deployment's prefix and ':', which `team_names` is derived from
    ARGV[2] about this many fields per call (HSCAN's COUNT)
  Output:
    {0, fields walked, 1 when the upgrade is done}

  Invariant: every team of `teams` when the upgrade starts is in `team_names` before the upgrade is
  marked done; the walk runs before a process of this version serves, so every team named since
  was named by nameTeam, with its counts.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/teams"
local teamsKey, upgradesKey = KEYS[1], KEYS[2]
local S = {base = ARGV[1], key = fixedKeys(ARGV[1])}

local cursor = rcall('HGET', upgradesKey, 'team_names')
if cursor == 'done' then
  return {0, 0, 1}
end
local reply = rcall('HSCAN', teamsKey, cursor or '0', 'COUNT', tonumber(ARGV[2]))
local fields = reply[2]
for i = 1, #fields, 2 do
  local team = string.match(fields[i], '^([^|]+)')
  if team and rcall('ZSCORE', S.key.team_names, team) == false then
    rcall('ZADD', S.key.team_names, 0, team)
    rcall('HSETNX', teamsKey, team .. '|tasks', LEGACY_TEAM_TASKS)
  end
end
local done = reply[1] == '0'
rcall('HSET', upgradesKey, 'team_names', done and 'done' or reply[1])
return {0, #fields / 2, done and 1 or 0}
