--[[
  What a step records besides the state it changes: a task's history, the deployment's feed, the
  operator who caused it, a device's ended runs, and the deployment's counters.

  Functions (each takes the deployment, includes/deployment.lua, first):
    setActor(S, actor, actorId)           name the operator on every event of this step
    publish(S, event)                     an event of no task, to the feed
    taskEvent(S, task, kind, now, ...)    an event of a task, to its history and the feed
    endRun(S, task, attempt, now, outcome) an attempt's run, to its device's runs
    count(S, name, by)                    add by (default 1) to a deployment-wide counter (`stats`)
    notifyWebhooks(S, kind, subject, team, at)  an event webhooks are told of, to the outbox
    taskEnded(S, task)                    a task reached its terminal status: `task.ended`

  Invariants kept: every transition appends its event to the task's history (the record the
  caller saves in the same step) and to the feed in the same step, so neither can disagree with
  the state; the history keeps the last TASK_EVENTS_KEPT events, the feed about FEED_EVENTS_KEPT,
  a device's runs at least the last DEVICE_RUNS_KEPT (what reads return), and a device's runs
  live while it is pooled and a retention after it leaves the pool (includes/pool.lua). An event
  that registered webhooks want is appended to the outbox in the step that makes it (one
  delivery per webhook that wants it), so a delivery is never lost nor invented; with no webhook
  for it, that costs one HGET.
]]
--- @include "includes/common"
--- @include "includes/deployment"

-- The operator on whose request a script runs (a token's name, or "admin"): every event of
-- that step names it as its `actor`, those of the transitions the request set off included
-- (a drain's `unassigned`, a create's `assigned`), and its token's id (or "admin") as its
-- `actor_id`: two live tokens may share a name (a rotation makes one), the id tells them
-- apart. A script an operator calls sets both from its own ARGV before any event; the host
-- protocol's and the reaper's scripts leave them nil.
local function setActor(S, actor, actorId)
  if actor ~= '' then
    S.actor, S.actor_id = actor, actorId
  end
end

-- An event webhooks are told of (PROTOCOL.md, "Webhooks"; `kind` one of wire.WebhookEvent):
-- one outbox entry per webhook that wants it, read by every coordinator process's delivery loop
-- (coordinator/webhooks.py). `webhook_routes` holds, per kind, the webhooks that want it with
-- their team filter, so with no webhook for the kind this is one HGET. A team filter limits task
-- and run events (`team` given) to that team's; host and device events (no team) go to all.
local function notifyWebhooks(S, kind, subject, team, at)
  local routes = rcall('HGET', S.key.webhook_routes, kind)
  if not routes then
    return
  end
  for _, route in ipairs(cjson.decode(routes)) do
    if route.team == nil or team == nil or route.team == team then
      rcall('XADD', S.key.webhook_outbox, '*', 'webhook', route.id, 'type', kind, 'subject', subject,
            'at', at)
    end
  end
end

-- The feed events webhooks are told of: their webhook kind, and the field naming their subject.
-- (`run_ended` is the runs' event: published with its `run_id` and `team`, it reaches webhooks.)
local WEBHOOK_EVENTS = {
  host_offline = {'host.offline', 'host_id'},
  device_disabled = {'device.disabled', 'device_id'},
  run_ended = {'run.ended', 'run_id'},
}

-- An event of no task (host_online, device_disabled, ...): to the feed, and to the webhooks that
-- want it.
local function publish(S, event)
  publishTo(S.key.feed, event, S.actor, S.actor_id)
  local hook = WEBHOOK_EVENTS[event.type]
  if hook then
    notifyWebhooks(S, hook[1], event[hook[2]], event.team, event.at)
  end
end

-- A task reached its terminal status (the caller saves it in the same step): `task.ended` to the
-- webhooks that want it.
local function taskEnded(S, task)
  notifyWebhooks(S, 'task.ended', task.id, task.team or DEFAULT_TEAM, task.finished_at)
end

-- A task's event: appended to its history, which its record carries (the last
-- TASK_EVENTS_KEPT), and to the feed. The caller saves the task afterwards: the history is part
-- of the record, so it costs no command of its own. `status` is the task's status after the
-- event, except for a `result`, where it is the reported one. `fields`: what else the event
-- names (a session's command: command_id, action, screen), or nil.
local function taskEvent(S, task, kind, now, reason, status, fields)
  local event = {
    at = now,
    type = kind,
    attempt = task.attempt,
    host_id = task.host_id,
    device_id = task.device_id or task.target_device,
    reason = reason,
    status = status or task.status,
    actor = S.actor,
    actor_id = S.actor_id,
  }
  for name, value in pairs(fields or {}) do
    event[name] = value
  end
  local history = task.events or {}
  history[#history + 1] = event
  if #history > TASK_EVENTS_KEPT then
    table.remove(history, 1)
  end
  task.events = history
  -- The feed's copy names the task, its team and its run (a watcher filters by any); the
  -- history, which lives in the task's own record, implies them.
  event.task_id, event.team, event.run_id = task.id, task.team, task.run_id
  rcall('XADD', S.key.feed, 'MAXLEN', '~', FEED_EVENTS_KEPT, '*', 'e', cjson.encode(event))
  event.task_id, event.team, event.run_id = nil, nil, nil
end

-- A device's runs, newest first, one entry per claimed attempt, written when the attempt ends
-- (the run in progress is the device's reserved running task: queries read it from there). One
-- LPUSH a run: the list is trimmed back to DEVICE_RUNS_KEPT only once it holds DEVICE_RUNS_SLACK
-- more (reads return at most the kept ones), and it has no expiry while its device is pooled; a
-- device that leaves the pool gives it one (includes/pool.lua), so does a run recorded after its
-- device left the pool when it starts the list.
local function endRun(S, task, attempt, now, outcome)
  if not task.device_id then
    return
  end
  local runs = derived(S, 'device_runs', task.device_id)
  local run = cjson.encode({task_id = task.id, attempt = attempt, host_id = task.host_id,
                            started_at = task.started_at, ended_at = now, outcome = outcome})
  local held = rcall('LPUSH', runs, run)
  if held > DEVICE_RUNS_KEPT + DEVICE_RUNS_SLACK then
    rcall('LTRIM', runs, 0, DEVICE_RUNS_KEPT - 1)
  elseif held == 1 and rcall('HEXISTS', S.key.devices, task.device_id) == 0 then
    rcall('PEXPIRE', runs, S.retentionMs)
  end
end

-- Add `by` (1 when not given) to a deployment-wide counter; adding 0 writes nothing.
local function count(S, name, by)
  by = by or 1
  if by ~= 0 then
    rcall('HINCRBY', S.key.stats, name, by)
  end
end
