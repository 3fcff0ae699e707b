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
  (Earlier versions kept field minute % 60 -> "<minute>:<ms>": counted alike, dropped as they age.)

  Functions (each takes the deployment, includes/deployment.lua, first, but teamOf and atQuota):
    teamOf(task)                     a task's team ('default' for one stored before teams)
    standingsOf(S, teams)            {team = {weight, max_devices, running}} in one read
    atQuota(standing)                the team holds its max_devices already
    countHeld(S, team, by)           a device taken (+1) or let go (-1) by one of its tasks;
                                     the team's count after it
    countQueued(S, team, by)         a task of the team queued (+1) or taken off its queue (-1)
    recordUsage(S, team, startedAt, now)  a run held a device from startedAt until now

  Invariants kept: "<team>|running" is the number of devices the team's tasks hold and
  "<team>|queued" the number of its queued tasks, changed in the same step as the reservation or
  the queue, so neither ever drifts (the model-based test compares both with the tasks after
  every step).
]]
--- @include "includes/common"
--- @include "includes/deployment"

local DEFAULT_TEAM = 'default'

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
      -- an earlier version's field is minute % 60 -> "<minute>:<ms>"
      local at = tonumber(string.match(fields[i + 1], '^(%d+):') or fields[i])
      if at <= minute - 60 then
        old[#old + 1] = fields[i]
      end
    end
    if #old > 0 then
      rcall('HDEL', usageKey, unpack(old))
    end
  end
end
