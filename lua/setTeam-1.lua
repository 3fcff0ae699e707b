--[[
  Set a team's share: its weight, its cap on devices held (or none), or both.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     team
    ARGV[7]     the settings to change, JSON: `weight` (1..1000), `max_devices` (a count, or null
                for no cap); a field left out keeps its value
  Output:
    {0, settings JSON {weight, max_devices}, devices held, tasks queued}

  Invariants: a team set back to the default (weight 1, no cap) with no task and no token is
  forgotten in this step (includes/teams.lua, forgetIdleTeam); a cap raised or lifted takes effect
  in this step: the team's waiting tasks take
  free devices they may run until it holds its cap (includes/placement.lua, placeTeamWork), so no
  task of it waits beside a free device it could take once the cap allows it; a cap lowered
  takes nothing back (the team's tasks hold their devices until they end) and lets it take no
  more; a weight counts from the next device freed.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/placement"
--- @include "includes/teams"
local S = deployment(KEYS, ARGV)
local team = ARGV[6]
local change = cjson.decode(ARGV[7])

local raw = rcall('HGET', S.key.teams, team)
local settings = raw and cjson.decode(raw) or {}
if change.weight ~= nil then
  settings.weight = change.weight
end
settings.weight = settings.weight or 1  -- never an empty table: some cjson builds write one as []
if change.max_devices ~= nil then
  settings.max_devices = change.max_devices  -- cjson.null: no cap
end
rcall('HSET', S.key.teams, team, cjson.encode(settings))
nameTeam(S, team)
if not hasSetting(rcall('HGET', S.key.teams, team)) then
  forgetIdleTeam(S, team)  -- set back to the default: named by its work or tokens alone, if any
end
placeTeamWork(S, team, nowMs())
local standing = standingsOf(S, {team})[team]
local queued = tonumber(rcall('HGET', S.key.teams, team .. '|queued')) or 0
return {0, cjson.encode({weight = standing.weight, max_devices = standing.max_devices or cjson.null}),
        standing.running, queued}
