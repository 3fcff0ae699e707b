--[[
  A lease renewed, with the latest progress: what a single renewal and a host's batch of them do
  for each lease, so the two can never judge a lease differently.

  Functions:
    renewOne(S, ttl, hostId, leaseId, taskId, attempt, progress, now)
        S: the deployment (includes/deployment.lua); ttl: the lease's (ms); `progress` the JSON
        to store, or "" to leave the stored one. Returns {0, new expiry (ms), cancel
        requested (0|1)}, or {failure}: LEASE_NOT_OWNED, LEASE_REPLACED or LEASE_EXPIRED as
        heldLease and extendLease (includes/common.lua) answer. The caller has checked the
        credential.

  Invariants kept: only the current, unexpired lease is ever extended (its deadline and its
  lease key's TTL together); a rejected renewal changes nothing, so a stale lease can never
  revive or alter the current attempt. Progress is kept in the lease key too, whose extension
  answers the step it held before: one that differs is stored in `progress` (what readers read)
  and published on the feed (type `progress`; not in the task's history, which keeps transitions
  only).
]]
--- @include "includes/common"
--- @include "includes/deployment"

-- Whether two progress reports name the same step ({step_index, status, summary}; nil for none).
local function sameStep(a, b)
  return a ~= nil and b ~= nil and a.step_index == b.step_index and a.status == b.status and a.summary == b.summary
end

local function renewOne(S, ttl, hostId, leaseId, taskId, attempt, progress, now)
  local task = getJson(S.key.tasks, taskId)
  local lease, failure = heldLease(leaseId, hostId, taskId, attempt, task)
  if not lease then
    return {failure}
  end
  local step = progress ~= '' and cjson.decode(progress) or nil
  local alive, before = extendLease(S.key.lease_deadlines, derived(S, 'lease', taskId), taskId,
                                    {lease_id = leaseId, host_id = hostId, attempt = attempt}, step, ttl, now)
  if not alive then
    return {E.LEASE_EXPIRED}
  end
  rcall('ZADD', S.key.lease_deadlines, now + ttl, taskId)
  if step and not sameStep(before, step) then
    rcall('HSET', S.key.progress, taskId, progress)
    rcall('XADD', S.key.feed, 'MAXLEN', '~', FEED_EVENTS_KEPT, '*', 'e', cjson.encode({
      type = 'progress', at = now, task_id = taskId, attempt = attempt, host_id = hostId,
      device_id = lease.device_id, step_index = step.step_index, status = step.status, summary = step.summary,
    }))
  end
  return {0, now + ttl, task.cancel_requested and 1 or 0}
end
