--[[
  Teams: how many devices each holds, what each may hold and its weight (PROTOCOL.md, "Sharing
  the fleet"). The `teams` hash holds, per team:
    "<team>"          its settings, JSON {weight, max_devices}: a field left out is the default
                      (weight 1, no cap); present once the team is named (a task, a token, the
                      admin's PUT)
    "<team>|running"  the devices its tasks hold (reserved: assigned or running)
    "<team>|queued"   its queued tasks
  and `team_usage:<team>` the device time its runs used, by the minute of their end, for the
  last hour's figure: field minute (ms since the epoch / 60000) -> ms, an hour of them at most.
  (Earlier versions kept field minute % 60 -> "<minute>:<ms>": lua/upgradeTeamUsage moves them.)

  Functions (each takes the deployment, includes/deployment.lua, first, but teamOf and atQuota):
    teamOf(task)                     a task's team ('default' for one stored before teams)
    standingsOf(S, teams)            {team = {weight, max_devices, running}} in one read
    atQuota(standing)                the team holds its max_devices already
    countHeld(S, team, by)           a device taken (+1) or let go (-1) by one of its tasks;
                                     the team's count after it
    countQueued(S, team, by)         a task of the team queued (+1) or taken off its queue (-1)
    recordUsage(S, team, startedAt, now)  a run held a device from startedAt until now
    usageOf(S, team, now)            the device time its runs used within the last hour (ms)

  Invariants kept: "<team>|running" is the number of devices the team's tasks hold and
  "<team>|queued" the number of its queued tasks, changed in the same step as the reservation or
  the queue, so neither ever drifts (the model-based test compares both with the tasks after
  every step).
]]
--- @include "includes/common"
--- @include "includes/deployment"

local function teamOf(task)
  return task.team or DEFAULT_TEAM
end

local function standingsOf(S, teams)
  local fields = {}
  for _, team in ipairs(teams) do
    fields[#fields + 1] = team
    fields[#fields + 1] = team .. '|running'
  end
  local raw = rcall('HMGET', S.key.teams, unpack(fields))
  local standings = {}
  for i, team in ipairs(teams) do
    local settings = raw[2 * i - 1] and cjson.decode(raw[2 * i - 1]) or {}
    local cap = settings.max_devices
    standings[team] = {
      weight = tonumber(settings.weight) or 1,
      max_devices = (cap ~= nil and cap ~= cjson.null) and tonumber(cap) or nil,
      running = tonumber(raw[2 * i]) or 0,
    }
  end
  return standings
end

local function atQuota(standing)
  return standing.max_devices ~= nil and standing.running >= standing.max_devices
end

local function countHeld(S, team, by)
  return rcall('HINCRBY', S.key.teams, team .. '|running', by)
end

local function countQueued(S, team, by)
  rcall('HINCRBY', S.key.teams, team .. '|queued', by)
end

local function recordUsage(S, team, startedAt, now)
  local minute = math.floor(now / 60000)
  local usageKey = derived(S, 'team_usage', team)
  local ms = now - math.max(startedAt, now - 3600000)
  -- One command a result: the minute's field added to. The minute's first (its sum is this run's
  -- alone) drops the fields an hour old, so the hash holds an hour at most, for one more command
  -- a minute.
  if rcall('HINCRBY', usageKey, minute, ms) == ms then
    local old = {}
    local fields = rcall('HGETALL', usageKey)
    for i = 1, #fields, 2 do
      if tonumber(fields[i]) <= minute - 60 then
        old[#old + 1] = fields[i]
      end
    end
    if #old > 0 then
      rcall('HDEL', usageKey, unpack(old))
    end
  end
end

-- An hour of fields at most (recordUsage drops the older ones as a minute begins).
local function usageOf(S, team, now)
  local minute = math.floor(now / 60000)
  local fields = rcall('HGETALL', derived(S, 'team_usage', team))
  local used = 0
  for i = 1, #fields, 2 do
    if tonumber(fields[i]) > minute - 60 then
      used = used + tonumber(fields[i + 1])
    end
  end
  return used
end

--[[
  Teams come and go (PROTOCOL.md, "Sharing the fleet"): a team with no work in the retention
  window, no setting and no token is forgotten. Besides the fields above, `teams` holds per team
    "<team>|tasks"    its task records retention has not deleted yet
    "<team>|tokens"   its operator tokens not revoked
  and `team_names` (a zset, score 0, read by lex range) names every team not forgotten, for the
  listing's pages. A team named before these counts existed has "<team>|tasks" set to
  LEGACY_TEAM_TASKS by the upgrade (lua/upgradeTeamNames): it is kept, as it was then.

  Functions:
    nameTeam(S, team, kind, by)   a team named by `by` more tasks or tokens (kind 'tasks',
                                  'tokens'), or by an admin's setting (kind nil)
    hasSetting(raw)               a team's settings JSON differs from the default
    forgetIdleTeam(S, team)       the team forgotten if nothing names it any more: no task
                                  stored, held or queued, no token, no setting; whether it was
    unnameTeam(S, team, kind)     one task or token of the team less, and the team forgotten if
                                  that was what named it last

  Invariant kept: a team is listed exactly while a task record, a token or a setting names it (or
  it was named before the counts existed); forgetting it deletes every key of it (its fields, its
  name, its usage), so 10,000 teams named once and left cost nothing a retention later.
]]
local LEGACY_TEAM_TASKS = 1000000000000
local TEAM_COUNTS = {'running', 'queued', 'tasks', 'tokens'}

-- A create costs one command: a count above what was just added had named the team before (a
-- count is deleted with its team's name, never left above 0 without it).
local function nameTeam(S, team, kind, by)
  if not kind or rcall('HINCRBY', S.key.teams, team .. '|' .. kind, by) == by then
    rcall('ZADD', S.key.team_names, 0, team)
  end
end

local function hasSetting(raw)
  if not raw then
    return false
  end
  local settings = cjson.decode(raw)
  local cap = settings.max_devices
  return (tonumber(settings.weight) or 1) ~= 1 or (cap ~= nil and cap ~= cjson.null)
end

local function forgetIdleTeam(S, team)
  local fields = {team}
  for _, kind in ipairs(TEAM_COUNTS) do
    fields[#fields + 1] = team .. '|' .. kind
  end
  local values = rcall('HMGET', S.key.teams, unpack(fields))
  if hasSetting(values[1]) then
    return false
  end
  for i = 2, #values do
    if (tonumber(values[i]) or 0) > 0 then
      return false
    end
  end
  rcall('HDEL', S.key.teams, unpack(fields))
  rcall('ZREM', S.key.team_names, team)
  rcall('DEL', derived(S, 'team_usage', team))
  return true
end

local function unnameTeam(S, team, kind)
  if rcall('HINCRBY', S.key.teams, team .. '|' .. kind, -1) <= 0 then
    forgetIdleTeam(S, team)
  end
end
