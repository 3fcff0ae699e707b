--[[
  Upgrade: queues by target and the free index by driver and label (includes/placement.lua).

  Earlier versions queued a task in `waiting:<driver>|<team>` or `waiting_device:<device>|<team>`,
  ranked teams in `queue_teams:<driver>` and `queue_teams_device:<device>`, listed a team's targets
  in `team_queues:<team>`, kept the free devices in one lex zset `free` ("driver\0device"), and had
  no index of the pool by label. A batch of queued tasks per call, oldest first from the cursor
  kept in `upgrades` field `placement` (the last seq moved): each leaves its old queue and joins
  its target's (enqueueTask), and the old indexes it was in are deleted; then a batch of pooled
  devices per call (HSCAN of `devices`, its cursor kept in field `placement_devices`): each joins
  its labels' `pooled_label` sets and, if it was in `free`, leaves it and is refreshed into the
  free index (or fed, should a task now fit it). The call that ends it deletes what is left of
  `free` and marks the upgrade done, after which a call costs one read. The earlier layout's keys
  are named here only.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     at most this many tasks or devices per call
  Output:
    {0, entries moved, 1 when the upgrade is done}

  Cost: a batch of tasks (each an enqueue) or devices (each a refresh).
  Invariant: a task queued in the earlier layout is queued in the new one, same score, before
  the upgrade is marked done; it runs as a process starts, before it serves (coordinator/reaper.py,
  upgrade_before_serving), so no request meets a half-moved queue of this process's version.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/placement"
local S = deployment(KEYS, ARGV)
local limit = tonumber(ARGV[6])

local cursor = rcall('HGET', S.key.upgrades, 'placement')
if cursor == 'done' then
  return {0, 0, 1}
end
local now = nowMs()
local low = STATUS_CODES.queued * STATUS_SPAN
local from = tonumber(cursor or '0')
local moved = 0
if from >= 0 then
  local queued = rcall('ZRANGEBYSCORE', S.key.tasks_by_status, '(' .. string.format('%.0f', low + from),
    '(' .. string.format('%.0f', low + STATUS_SPAN), 'LIMIT', 0, limit)
  for _, taskId in ipairs(queued) do
    local task = getJson(S.key.tasks, taskId)
    if task and task.status == 'queued' and not task.target_id then
      local team = teamOf(task)
      local target = task.target_device or task.driver
      local kind = task.target_device and 'waiting_device:' or 'waiting:'
      if rcall('ZREM', S.base .. kind .. target .. '|' .. team, taskId) == 1 then
        countQueued(S, team, -1)  -- enqueueTask counts it again
      end
      rcall('DEL', S.base .. (task.target_device and 'queue_teams_device:' or 'queue_teams:') .. target,
        S.base .. 'team_queues:' .. team)
      enqueueTask(S, task)
      saveTask(S, task, 'queued')
      moved = moved + 1
    end
    from = task and task.seq or from
  end
  if #queued == limit then
    rcall('HSET', S.key.upgrades, 'placement', string.format('%.0f', from))
    return {0, moved, 0}
  end
  rcall('HSET', S.key.upgrades, 'placement', '-1')  -- the queues are done: the free devices next
end
local oldFree = S.base .. 'free'
local reply = rcall('HSCAN', S.key.devices, rcall('HGET', S.key.upgrades, 'placement_devices') or '0', 'COUNT', limit)
local fields = reply[2]
for i = 1, #fields, 2 do
  local deviceId, device = fields[i], cjson.decode(fields[i + 1])
  indexPooled(S, deviceId, device, 'ZADD')
  if rcall('ZREM', oldFree, freeMember(device.driver, deviceId)) == 1 then
    refreshDevice(S, deviceId, now)
  end
  moved = moved + 1
end
if reply[1] ~= '0' then
  rcall('HSET', S.key.upgrades, 'placement_devices', reply[1])
  return {0, moved, 0}
end
rcall('DEL', oldFree)
rcall('HDEL', S.key.upgrades, 'placement_devices')
rcall('HSET', S.key.upgrades, 'placement', 'done')
return {0, moved, 1}
