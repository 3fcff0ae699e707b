--[[
  Why a queued task waits (PROTOCOL.md, "Waiting work"): the pooled devices its target could use,
  each counted under the first reason that keeps it from work, read in the step that queued it
  (createTask) or on demand (readWaiting). Counted here, with the scheduler's own predicates
  (the pool's label indexes, workflowOf, hostState, runsTask of includes/pool.lua), so the
  service restates none of them: it only turns the counts into a waiting reason
  (coordinator/state/wait_reasons.py).

  Functions:
    hostStanding(S, hostId, now, task)    what of a host decides whether its devices take the task
    hostFlags(standing)                   a standing as one number, the bits of HOST_FLAGS (what
                                          readHostFlags answers the service)
    notFreeBecause(standing, device, reservedBy, disabled)  the count a matching device falls
                                          under, or nil when it could take the task now
    waitingCandidates(S, task, limit, now)  the counts of a task's target: truncated (0|1), then
                                          one number per name of CANDIDATE_COUNTS, in its order,
                                          then whether the task's team is at its quota (0|1)

  Generated from Python as the library loads (coordinator/state/scripts.py, lua_constants):
  HOST_FLAGS (coordinator.state.wait_reasons.HostFlag) and CANDIDATE_COUNTS (the names of the
  contract's `candidates` counts, in the order of the reply).

  It reads, of the deployment S (includes/deployment.lua), offlineAfterMs, the keys devices,
  reservations, disabled_devices, devices_by_driver and teams, each label's
  `pooled_label:<driver>|<name>=<value>` and each host's `host_state:<host>`
  (derived from the key base); readWaiting and readHostFlags build an S of those alone.

  Invariant: reads only, in one step, so the counts agree with each other; a device counted under
  no reason is one the task could take now (free, and its host may run the task), which a queued
  task never has beside it (includes/placement.lua).
]]
--- @include "includes/common"
--- @include "includes/pool"
--- @include "includes/teams"

-- Of a host: its hostState (online, draining, stalled), and `runs`, whether it may run `task`
-- (a goal: always; a workflow: it lists it, or lists nothing).
local function hostStanding(S, hostId, now, task)
  local host = hostState(S, hostId, now)
  host.runs = runsTask(host.workflows, task)
  return host
end

-- A standing as one number: the sum of the HOST_FLAGS bits that hold.
local function hostFlags(standing)
  local flags = 0
  if standing.online then flags = flags + HOST_FLAGS.ONLINE end
  if standing.draining then flags = flags + HOST_FLAGS.DRAINING end
  if standing.stalled then flags = flags + HOST_FLAGS.STALLED end
  if standing.runs then flags = flags + HOST_FLAGS.RUNS_WORKFLOW end
  return flags
end

-- Why a device of the target cannot take the task now: the first of host offline, no workflow
-- (its online host does not list the task's workflow), disabled, host draining, busy (reserved, or
-- reported busy), unavailable, host stalled (it let a claim time out and has not polled since);
-- nil when none holds. The host's own reasons come first, so the counts tell whether any online
-- host of the matching devices may run the task (`no_capable_host`, PROTOCOL.md), whatever
-- an operator did to its devices. `reservedBy` and `disabled` are the device's fields of
-- reservations and disabled_devices, false when absent.
local function notFreeBecause(standing, device, reservedBy, disabled)
  if not standing.online then
    return 'host_offline'
  elseif not standing.runs then
    return 'no_workflow'
  elseif disabled then
    return 'disabled'
  elseif standing.draining then
    return 'host_draining'
  elseif reservedBy or device.status == 'busy' then
    return 'busy'
  elseif device.status == 'unavailable' then
    return 'unavailable'
  elseif standing.stalled then
    return 'host_stalled'
  end
  return nil
end

-- The counts of a task's target (`task`: a task record, or a table of its target_device, driver,
-- labels, kind and workflow): one device, or the first `limit` pooled devices of its driver, in id
-- order, with its labels (truncated says there were more). Cost: the labels' intersection (C time
-- of the smallest index) and at most `limit` devices read.
local function waitingCandidates(S, task, limit, now)
  local ids = {}
  local truncated = 0
  local labels = cjson.decode(task.labels or '{}')
  local indexed = next(labels) ~= nil  -- a selector of labels: its matching devices, by index
  if task.target_device then
    ids[1] = task.target_device
  elseif indexed then
    local keys = {}
    for name, value in pairs(labels) do
      keys[#keys + 1] = derived(S, 'pooled_label', labelIndex(task.driver, name, value))
    end
    local members
    if #keys == 1 then
      members = rcall('ZRANGE', keys[1], 0, limit)
    else
      members = rcall('ZINTER', #keys, unpack(keys))  -- in id order (every score 0)
    end
    for i = 1, math.min(#members, limit) do
      ids[i] = members[i]
    end
    truncated = #members > limit and 1 or 0
  else
    local low, high = prefixRange(task.driver)
    local members = rcall('ZRANGEBYLEX', S.key.devices_by_driver, low, high, 'LIMIT', 0, limit + 1)
    if #members > limit then
      truncated = 1
      members[#members] = nil
    end
    for i, member in ipairs(members) do
      ids[i] = splitMember(member)[2]
    end
  end
  local counts = {}
  for _, name in ipairs(CANDIDATE_COUNTS) do
    counts[name] = 0
  end
  if #ids > 0 then
    local records = rcall('HMGET', S.key.devices, unpack(ids))
    local reserved = rcall('HMGET', S.key.reservations, unpack(ids))
    local disabled = rcall('HMGET', S.key.disabled_devices, unpack(ids))
    local standingOf = {}
    for i, raw in ipairs(records) do
      local device = raw and cjson.decode(raw)
      if device then  -- every id read matches the target: its device, or by the indexes
        local hostId = device.host_id
        standingOf[hostId] = standingOf[hostId] or hostStanding(S, hostId, now, task)
        counts.matching = counts.matching + 1
        local why = notFreeBecause(standingOf[hostId], device, reserved[i], disabled[i])
        if why then
          counts[why] = counts[why] + 1
        end
      end
    end
  end
  local answer = {truncated}
  for i, name in ipairs(CANDIDATE_COUNTS) do
    answer[i + 1] = counts[name]
  end
  -- Read, not inferred: `team_at_quota` is a reason only while the team holds its quota.
  local team = teamOf(task)
  answer[#answer + 1] = atQuota(standingsOf(S, {team})[team]) and 1 or 0
  return answer
end
