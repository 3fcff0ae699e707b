--[[
  Read teams as the scheduler reads them (includes/teams.lua, standingsOf): each one's weight,
  cap and devices held, with its queued tasks and the device time its ended runs used within the
  last hour. What the operator API and /metrics show of a team, so the service parses none of
  the `teams` hash's fields or the usage hash's two versions. Reads only.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..] team names
  Keys it touches:
    teams              hash  "<team>" settings, "<team>|running", "<team>|queued"
    team_usage:<team>  hash  an hour of minutes' device time at most
  Output:
    {0, now (ms), then per team in the order given: weight, max_devices (-1: none), devices held,
     queued tasks, ms its ended runs used within the hour}

  Invariant: changes nothing. Cost: per team one field of `teams` and its usage hash (an hour of
  minutes at most): bounded by the page of teams asked about.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/teams"
local S = deployment(KEYS, ARGV)
local now = nowMs()
local teams = {}
for i = 6, #ARGV do
  teams[#teams + 1] = ARGV[i]
end
local standings = standingsOf(S, teams)
local answer = {0, now}
for _, team in ipairs(teams) do
  local standing = standings[team]
  answer[#answer + 1] = standing.weight
  answer[#answer + 1] = standing.max_devices or -1
  answer[#answer + 1] = standing.running
  answer[#answer + 1] = tonumber(rcall('HGET', S.key.teams, team .. '|queued')) or 0
  answer[#answer + 1] = usageOf(S, team, now)
end
return answer
