--[[
  A task leaving its device: a result or an expiry ends its attempt, a requeue puts it back in
  its queue (the same attempt, or the next), and the device it held takes other work.

  Functions (each takes the deployment, includes/deployment.lua, first, but nextAttempt):
    dropReservation(S, task, now, holds)     the task no longer holds its device
    releaseDevice(S, task, now, finished)    drop it, and let the device take other work
    finishTask(S, task, previous, now)       a terminal status: saved, deleted after retention,
                                             and told to webhooks; a live session's relay ends
                                             (includes/sessions.lua, sessionEnded)
    nextAttempt(task, now)                   a new attempt starts its wait
    requeueTask(S, task, now, kind, reason)  a task that held a device goes back to its queue
    unassignTask(S, task, now, reason)       an assignment its host will not claim goes back
    startTask(S, task, now)                  a new task: aged, `created`, placed and saved
    cancelTaskNow(S, task, now)              an operator's cancel of one task (a running
                                             session's host poll is woken to hear of it)

  Invariants kept: a task leaves its device and reaches its next state (queued, or terminal with
  a retention deadline) in one step, recording its event; a requeued task is placed before its
  old device is freed, so it never waits behind that device; a terminal task holds no device.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/teams"
--- @include "includes/sessions"

-- Remove the task's reservation of its device (if it still holds it), counting it off its
-- team's devices and its run's time into the team's usage; the device id, or nil, and whether
-- the reservation was dropped, and whether that took the team below its quota. `holds`: the
-- caller knows the task holds it (it was running: a running task's device is reserved by it,
-- placement's invariant), so the reservation is not read first.
local function dropReservation(S, task, now, holds)
  local deviceId = task.device_id
  if deviceId and (holds or rcall('HGET', S.key.reservations, deviceId) == task.id) then
    rcall('HDEL', S.key.reservations, deviceId)
    local team = teamOf(task)
    local running = countHeld(S, team, -1)
    -- Its attempt ran (was claimed since it last queued): the time since the claim was used.
    if task.started_at and task.started_at >= task.queued_at then
      recordUsage(S, team, task.started_at, now)
    end
    local cap = standingsOf(S, {team})[team].max_devices
    return deviceId, true, cap ~= nil and running + 1 >= cap and running < cap
  end
  return deviceId, false, false
end

-- Drop a task's hold on its device and let the device take other work.
-- `finished` marks a device the agent reported busy as available again: the agent has just told
-- us the work that made it busy is over, and waiting for its next heartbeat would idle it. It
-- comes only with the result of a running attempt, so the task holds its device.
local function releaseDevice(S, task, now, finished)
  local deviceId, released, belowQuota = dropReservation(S, task, now, finished)
  if not deviceId then
    return
  end
  local device = nil
  if finished then
    device = getJson(S.key.devices, deviceId)
    if device and device.status == 'busy' then
      device.status = 'available'
      putJson(S.key.devices, deviceId, device)
    end
  end
  deviceLetGo(S, deviceId, now, device, released)
  if belowQuota then
    teamBackUnderQuota(S, teamOf(task), now)
  end
end

-- A task reaches a terminal status: it is saved, and deleted once the retention has passed.
local function finishTask(S, task, previous, now)
  task.finished_at = now
  task.updated_at = now
  saveTask(S, task, previous)
  rcall('ZADD', S.key.retention, now + S.retentionMs, task.id)
  taskEnded(S, task)
  if task.kind == 'session' then
    sessionEnded(S, task, now)
  end
end

-- A new attempt starts its wait: a fresh queue deadline, and the clock of schedule-to-start.
local function nextAttempt(task, now)
  task.attempt = task.attempt + 1
  task.queued_at = now
  if task.queue_timeout_ms then
    task.queue_deadline = now + task.queue_timeout_ms
  end
end

-- Put a task that held a device back in the queue (same attempt unless the caller bumped it),
-- recording `kind` with `reason` (the event still names the host and device it leaves), and
-- placing it before its old device is freed so it does not wait behind that device.
local function requeueTask(S, task, now, kind, reason)
  local deviceId, released, belowQuota = dropReservation(S, task, now)
  local previous = task.status
  task.status = 'queued'
  taskEvent(S, task, kind, now, reason)
  task.device_id = nil
  task.host_id = nil
  task.lease_id = nil
  task.updated_at = now
  placeTask(S, task, now)
  -- Saved before its old device is refreshed: feeding that device may read it from its queue.
  saveTask(S, task, previous)
  if deviceId then
    deviceLetGo(S, deviceId, now, nil, released)
  end
  if belowQuota then
    teamBackUnderQuota(S, teamOf(task), now)
  end
end

-- An assigned task whose host will not claim it (host offline, device gone, claim timeout,
-- drain, disable) returns to the queue, same attempt.
local function unassignTask(S, task, now, reason)
  rcall('LREM', derived(S, 'assigned', task.host_id), 1, task.id)
  rcall('ZREM', S.key.claim_deadlines, task.id)
  requeueTask(S, task, now, 'unassigned', reason)
end

-- A new task (its id and spec set by the caller): given its age and first attempt, `created` in
-- its history, placed on a free device or queued, and saved; its JSON.
local function startTask(S, task, now)
  task.seq = rcall('INCR', S.key.task_seq)
  task.status = 'queued'
  task.attempt = 1
  task.created_at = now
  task.updated_at = now
  task.queued_at = now
  if task.queue_timeout_ms then
    task.queue_deadline = now + task.queue_timeout_ms
  end
  taskEvent(S, task, 'created', now)
  placeTask(S, task, now)
  return saveTask(S, task, nil)
end

-- Cancel a task: at once when it is queued or assigned (it leaves its queue or device and is
-- `cancelled`); a running one is asked to stop (`cancel_requested`: cancelled when its agent
-- reports or its lease expires). Whether the cancel holds (false: it already succeeded or failed).
local function cancelTaskNow(S, task, now)
  local previous = task.status
  if previous == 'queued' then
    unqueueTask(S, task)
  elseif previous == 'assigned' then
    rcall('LREM', derived(S, 'assigned', task.host_id), 1, task.id)
    rcall('ZREM', S.key.claim_deadlines, task.id)
    releaseDevice(S, task, now, false)
  elseif previous == 'running' then
    if not task.cancel_requested then
      task.cancel_requested = true
      task.updated_at = now
      taskEvent(S, task, 'cancel_requested', now)
      saveTask(S, task, previous)
      if task.kind == 'session' then  -- its host hears of it at once, not at its next poll
        wakePolls(S, commandsTopic(task.id), now)
      end
    end
    return true
  else
    return previous == 'cancelled'
  end
  task.status = 'cancelled'
  task.failure_reason = 'cancelled'
  taskEvent(S, task, 'cancelled', now, 'cancelled')
  finishTask(S, task, previous, now)
  return true
end
