--[[
  Helpers every script includes.

  Errors: scripts answer {code, payload}; code 0 is success, a negative code is one of E.

  Defined above every include, generated from Python as the library loads (coordinator/state/scripts.py,
  lua_constants), so the two sides cannot differ: E (coordinator.errors.ScriptError, the failure
  codes), TASK_EVENTS_KEPT, DEVICE_RUNS_KEPT and FEED_EVENTS_KEPT (wire: what is kept),
  DEVICE_FEEDS_PER_STEP (how many devices a step feeds, includes/placement.lua), STATUS_CODES and
  STATUS_SPAN (coordinator.state.keys: the status index's scores), and KEY_NAMES and
  KEY_KINDS (coordinator.state.keys: the names keys are derived by, includes/deployment.lua).

  The other includes, by concern, each opening with what it holds and the invariants it keeps:
    deployment  the keys (derived from the key base) and settings every script runs with, and the
                one rule for keys
    events      a task's history, the feed, the actor, a device's runs, the counters
    pool        the devices hosts report; whether a host is online and schedulable
    wakeups     waiting polls registered, and woken through their process's inbox
    placement   which device runs which task: queues by target, the free index, reservations,
                assignment
    dispatch    an assigned task handed to its host under a fresh lease (a claim, a result's
                eager dispatch), and the answer a repeated request gets
    tasks       a task leaving its device: finished, requeued, unassigned
    hosts       a host paused (drained, stalled), resumed, or detached (offline, revoked)
    candidates  why a queued task waits
    tokens      operator and enrollment tokens: revoked for good
    upgrades    the walk an upgrade of an earlier layout makes once
]]
-- redis.call, bound by each function as it starts (coordinator/state/scripts.py): while Redis loads the
-- library, where these helpers are defined, it offers no redis.call yet.
local rcall


-- How far a test has moved the clock (ms): the last argument of every call, which the function
-- takes off ARGV as it starts (coordinator/state/scripts.py). Always 0 outside tests (coordinator/clock.py).
local clockOffsetMs = 0

-- Milliseconds from the Redis clock, so every coordinator process agrees on lease expiry. The one
-- place any script reads the time.
local function nowMs()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + clockOffsetMs
end

-- An index member: fields joined by NUL ("driver\0device id"); ids never contain NUL.
local function indexMember(...)
  return table.concat({...}, '\0')
end

-- tasks_by_status holds each task once, as its id, scored code * 2^48 + seq: a status is one
-- score range in age order, and a transition is one ZADD that moves the task to its new range.

-- As a decimal string: a score above 2^31 must reach Redis with every digit.
local function statusScore(status, seq)
  return string.format('%.0f', STATUS_CODES[status] * STATUS_SPAN + seq)
end

-- The ZRANGEBYLEX bounds of every member whose first field is `first`.
local function prefixRange(first)
  return '[' .. first .. '\0', '(' .. first .. '\1'
end

-- Split an index member "a\0b" or "a\0b\0c" (ids never contain NUL: they are [A-Za-z0-9._:-]).
local function splitMember(member)
  local parts = {}
  local start = 1
  while true do
    local i = string.find(member, '\0', start, true)
    if not i then
      parts[#parts + 1] = string.sub(member, start)
      return parts
    end
    parts[#parts + 1] = string.sub(member, start, i - 1)
    start = i + 1
  end
end

-- An event of no task to the feed (a capped stream). `actor`, the operator who caused it (the
-- token's name, or "admin"), is named on it when given, with `actorId` (the token's id, or
-- "admin"): "" or nil names none.
local function publishTo(feedKey, event, actor, actorId)
  if actor and actor ~= '' then
    event.actor, event.actor_id = actor, actorId
  end
  rcall('XADD', feedKey, 'MAXLEN', '~', FEED_EVENTS_KEPT, '*', 'e', cjson.encode(event))
end

local function getJson(hashKey, field)
  local raw = rcall('HGET', hashKey, field)
  if not raw then
    return nil
  end
  return cjson.decode(raw)
end

local function putJson(hashKey, field, value)
  rcall('HSET', hashKey, field, cjson.encode(value))
end

-- A reaper's sweep of a deadline index (a zset of task ids scored by when each is due): each id
-- due by `now`, at most `limit` of them, oldest first, is taken off the index and then handed to
-- `act(taskId, task)` with its record from `tasksKey` (nil when the task is gone), one after the
-- other, so a deadline is acted on once, in the step that removes it. Returns how many it took.
local function sweepDue(indexKey, tasksKey, now, limit, act)
  local due = rcall('ZRANGEBYSCORE', indexKey, '-inf', now, 'LIMIT', 0, limit)
  for _, taskId in ipairs(due) do
    rcall('ZREM', indexKey, taskId)
    act(taskId, getJson(tasksKey, taskId))
  end
  return #due
end

-- Whether a host's credential (the SHA-256 of the token it presented) is revoked: the one test
-- every host script makes first, so a revocation holds on every route from its next request.
local function credentialRevoked(revokedKey, credential)
  return rcall('SISMEMBER', revokedKey, credential) == 1
end

-- The lease a host presents for a task attempt, or nil and the failure to answer: the lease is
-- unknown, another host's, or not this task and attempt. `task` is the task's record, or nil: the
-- record keeps every lease it had (`leases`: id, host and attempt of each), so a lease is known
-- exactly as long as its task is. (Records written when each lease was a key of its own list bare
-- ids: those earlier leases answer as unknown.) The credential is checked apart, by
-- credentialRevoked, so a batch of a host's renewals asks Redis once.
local function knownLease(leaseId, hostId, taskId, attempt, task)
  if not task then
    return nil, E.LEASE_NOT_OWNED
  end
  if task.lease_id == leaseId then
    if task.host_id ~= hostId or task.attempt ~= attempt then
      return nil, E.LEASE_NOT_OWNED
    end
    return {task_id = taskId, host_id = hostId, attempt = attempt, device_id = task.device_id}
  end
  for _, lease in ipairs(task.leases or {}) do
    if type(lease) == 'table' and lease.id == leaseId then
      if lease.host_id ~= hostId or lease.attempt ~= attempt then
        return nil, E.LEASE_NOT_OWNED
      end
      return {task_id = taskId, host_id = hostId, attempt = attempt}
    end
  end
  return nil, E.LEASE_NOT_OWNED
end

-- knownLease, for a credential not yet checked: a revoked one is refused first.
local function presentedLease(revokedKey, credential, leaseId, hostId, taskId, attempt, task)
  if credentialRevoked(revokedKey, credential) then
    return nil, E.REVOKED
  end
  return knownLease(leaseId, hostId, taskId, attempt, task)
end

-- Whether `deadlinesKey` (`lease_deadlines`) has the task's deadline still ahead of `now`.
local function deadlineAhead(deadlinesKey, taskId, now)
  local deadline = rcall('ZSCORE', deadlinesKey, taskId)
  return deadline ~= false and tonumber(deadline) > now
end

-- The lease a host presents, its credential already checked: knownLease, then the attempt must be
-- the task's current one (else LEASE_REPLACED), and the lease the task's running one by its record
-- (else LEASE_EXPIRED). Returns the lease, or nil and the failure. Whether it is still alive is the
-- caller's next question: currentLease asks its deadline, extendLease its key.
local function heldLease(leaseId, hostId, taskId, attempt, task)
  local lease, failure = knownLease(leaseId, hostId, taskId, attempt, task)
  if not lease then
    return nil, failure
  end
  if task.attempt > attempt then
    return nil, E.LEASE_REPLACED
  end
  if not (task.status == 'running' and task.lease_id == leaseId) then
    return nil, E.LEASE_EXPIRED
  end
  return lease
end

-- heldLease, and its deadline still ahead (else LEASE_EXPIRED): the lease an artifact upload
-- presents. Renewals judge the same lease alive by extendLease, which agrees (its key lives exactly
-- until that deadline), so the two can never disagree on which lease is current.
local function currentLease(deadlinesKey, leaseId, hostId, taskId, attempt, task, now)
  local lease, failure = heldLease(leaseId, hostId, taskId, attempt, task)
  if lease and not deadlineAhead(deadlinesKey, taskId, now) then
    return nil, E.LEASE_EXPIRED
  end
  return lease, failure
end

-- Whether a task's running lease (heldLease, or a repeated claim's, by its record) is alive,
-- extending it to `ttl` ms from `now` when it is; the caller then moves its deadline. Its key
-- `lease:<task>` is there exactly while it is alive: the key's TTL is the lease's time left,
-- written on the Redis clock in every step that writes its deadline. So extending the key only if
-- it is there judges and extends in one command: PEXPIRE, or, given `step` (the renewal's
-- progress, a table, kept in the key beside `held`, {lease_id, host_id, attempt}), SET XX GET,
-- which answers the progress the key held before (so a renewal knows whether its step is news
-- without reading it apart). A key missing is judged by the deadline: a lease claimed by a version
-- before lease keys is alive until its deadline, and gets its key. Returns whether it is alive
-- and the progress held before (nil for none, or without `step`).
local function extendLease(deadlinesKey, leaseKey, taskId, held, step, ttl, now)
  local function value()
    return cjson.encode({lease_id = held.lease_id, host_id = held.host_id, attempt = held.attempt, progress = step})
  end
  if step then
    local before = rcall('SET', leaseKey, value(), 'XX', 'GET', 'PX', ttl)
    if before then
      return true, cjson.decode(before).progress
    end
  elseif rcall('PEXPIRE', leaseKey, ttl) == 1 then
    return true  -- the key kept as it is: nothing to encode
  end
  if not deadlineAhead(deadlinesKey, taskId, now) then
    return false
  end
  rcall('SET', leaseKey, value(), 'PX', ttl)
  return true
end

-- currentLease, for a credential not yet checked: a revoked one is refused first.
local function runningLease(revokedKey, deadlinesKey, credential, leaseId, hostId, taskId, attempt, task, now)
  if credentialRevoked(revokedKey, credential) then
    return nil, E.REVOKED
  end
  return currentLease(deadlinesKey, leaseId, hostId, taskId, attempt, task, now)
end

-- The task and the lease of a host's request about one attempt (a renewal, an artifact upload,
-- its check before the bytes), checked by runningLease. The scripts that ask take the same
-- leading arguments, ARGV[6..10]: host id, lease id, task id, attempt and credential digest, so
-- they cannot disagree on what they check. S: the deployment (includes/deployment.lua).
-- Returns the task and the lease, or the task, nil and the failure.
local function requestLease(S, args, now)
  local task = getJson(S.key.tasks, args[8])
  local lease, failure = runningLease(S.key.revoked_tokens, S.key.lease_deadlines, args[10], args[7], args[6], args[8],
    tonumber(args[9]), task, now)
  return task, lease, failure
end
