--[[
  Read teams as the scheduler reads them (includes/teams.lua, standingsOf): each one's weight,
  cap and devices held, with its queued tasks and the device time its ended runs used within the
  last hour. What the operator API and /metrics show of a team, so the service parses none of
  the `teams` hash's fields or the usage hash's two versions. Reads only.

  Input:
    KEYS[1] tasks   the deployment's task records: names the slot; every key read is derived from
                    the key base and carries the same hash tag (includes/deployment.lua)
    ARGV[1] key base: the deployment's prefix and ':' (`tether:{default}:`)
    ARGV[2..] team names
  Keys it reads:
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
local S = {base = ARGV[1], key = fixedKeys(ARGV[1])}
local now = nowMs()
local teams = {}
for i = 2, #ARGV do
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
