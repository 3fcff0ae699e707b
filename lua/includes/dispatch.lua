--[[
  Dispatch: an assigned task handed to its host under a fresh lease, and the answer a repeated
  request gets. What a claim does (claimAssignment-1.lua) and what a result's eager dispatch does
  (recordResult-1.lua, `next`), written once, so the two can never hand out different
  assignments or leases.

  Functions (each takes the deployment, includes/deployment.lua, first):
    dispatchTask(S, task, previous, hostId, leaseId, ttl, replayField, now)
        the task (assigned to a device of hostId, `previous` its status as last saved) starts
        running under lease `leaseId` for `ttl` ms: its record (status, lease, every lease it
        had), `claimed` in its history and the feed, its lease deadline and its lease key. Its
        assignment, JSON, is returned; given `replayField` (a field of `claims`), it is also kept
        there, named in the task's `claims` so retention deletes it, for a repeat to get.
    replayAssignment(S, field, hostId, ttl, now)
        the assignment kept under `field` of `claims` again: nil when none was kept; false when
        its lease has ended (expired, replaced, its result recorded: never revived); else its
        JSON, the lease extended to a full `ttl` from now.

  Cost: dispatchTask one HSET of the record, one XADD, one ZADD of the status index (and of the
  run's counts, a task of a run), one ZADD of the lease deadline (and one of the session's
  deadline, a live session's), one SET of the lease key, and
  one HSET of `claims` given a replay field; replayAssignment one HGET, one HGET of the task, the
  lease key's extension (one command), one ZADD and one HSET.

  Invariants kept: a dispatched task is `running`, holds its device (its reservation, made when it
  was assigned), and has exactly one live lease: its deadline in `lease_deadlines` and its key
  `lease:<task>` with the lease's time left as TTL; an ended lease is never revived by a repeat;
  the answer's lease_expires_at_ms is a full TTL ahead of the step that answers it.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/sessions"

local function dispatchTask(S, task, previous, hostId, leaseId, ttl, replayField, now)
  task.status = 'running'
  task.lease_id = leaseId
  task.started_at = now
  task.updated_at = now
  -- Every lease of the task, so a late call with an earlier one gets its exact answer; and every
  -- claim record, so that retention can delete them.
  task.leases = task.leases or {}
  task.leases[#task.leases + 1] = {id = leaseId, host_id = hostId, attempt = task.attempt}
  if replayField then
    task.claims = task.claims or {}
    task.claims[#task.claims + 1] = replayField
  end
  taskEvent(S, task, 'claimed', now)
  saveTask(S, task, previous)

  rcall('ZADD', S.key.lease_deadlines, now + ttl, task.id)
  if task.kind == 'session' then  -- its idle timeout and max duration run from now
    scheduleSession(S, task)
  end
  rcall('SET', derived(S, 'lease', task.id),
        cjson.encode({lease_id = leaseId, host_id = hostId, attempt = task.attempt}), 'PX', ttl)

  local encoded = cjson.encode({
    task_id = task.id,
    attempt = task.attempt,
    lease_id = leaseId,
    lease_ttl_ms = ttl,
    lease_expires_at_ms = now + ttl,
    device_id = task.device_id,
    kind = task.kind,
    goal = task.goal,
    workflow = task.workflow,
    max_steps = task.max_steps,
    session = sessionOf(task),
  })
  if replayField then
    rcall('HSET', S.key.claims, replayField, encoded)
  end
  return encoded
end

local function replayAssignment(S, field, hostId, ttl, now)
  local earlier = rcall('HGET', S.key.claims, field)
  if not earlier then
    return nil
  end
  local assignment = cjson.decode(earlier)
  local leased = getJson(S.key.tasks, assignment.task_id)
  if not (leased and leased.status == 'running' and leased.lease_id == assignment.lease_id
          and extendLease(S.key.lease_deadlines, derived(S, 'lease', assignment.task_id), assignment.task_id,
                          {lease_id = assignment.lease_id, host_id = hostId, attempt = leased.attempt}, nil,
                          ttl, now)) then
    return false
  end
  rcall('ZADD', S.key.lease_deadlines, now + ttl, assignment.task_id)
  assignment.lease_ttl_ms = ttl
  assignment.lease_expires_at_ms = now + ttl
  local encoded = cjson.encode(assignment)
  rcall('HSET', S.key.claims, field, encoded)
  return encoded
end
