--[[
  Reaper: delete terminal tasks whose retention has passed, with everything hanging off them:
  the record (which carries its history and its leases), its index entries, its idempotency key,
  its progress, its claim records, its artifacts' descriptions and a session's commands
  (commands, command_log, command_queue, command_events:<task>, session_deadlines); a run goes with the last of
  its tasks (includes/runs.lua, forgetRunTask). A task of a run is kept until a retention after
  its run ended (includes/runs.lua, runKeepsUntil): its deadline is moved there instead. The
  artifacts' bytes live outside Redis: the blob keys no description names any more are answered,
  for the caller to delete from the blob store (coordinator/blobs/artifacts.py); a blob the caller
  never gets to delete is an orphan, which the orphan sweep finds.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] at most this many tasks per call
    ARGV[7] take no further task once this many artifact descriptions were deleted (bounds the
            call's work; the tasks left stay due for the next call)
  Keys it touches:
    tasks            hash  task id -> task JSON
    tasks_by_status  zset  task id -> its status and age
    retention        zset  task id -> when it is deleted (ms); the index this sweep reads
    idempotency      hash  "<token id>\0<idempotency key>" -> task id
                           (includes/idempotency.lua)
    claims           hash  "host id\0claim id" -> assignment JSON
    progress         hash  task id -> latest progress JSON
    stats            hash  deployment-wide counters
    artifacts        hash  "task id\0attempt\0name" -> description JSON
    artifact_index   zset  "task id\0attempt\0name", score 0 (lex)
    artifact_usage  hash  task id -> bytes of its artifacts
    artifact_blobs  set   blob keys some description names
    and a run's (runs, runs_by_age, run_idempotency, run_counts:<run>, run_tasks:<run>:
    includes/runs.lua) and a team's (teams, team_names, team_usage:<team>: includes/teams.lua,
    unnameTeam); the deployment's retention (ARGV[5]) is that of a task whose run ended later
  Output:
    {0, number of tasks deleted, number of due tasks taken, blob key, blob key, ...}

  Invariants: only terminal tasks are deleted, each once, and a task of a run not before a
  retention after the run ended (a run that has not ended keeps every task it counts); afterwards
  no key of the deployment names the task (so a late result or renewal for it finds no lease:
  lease_not_owned), and an idempotency key pointing at a newer task is left alone. A blob key is answered once, when the
  last description naming it goes (blob keys are per task, so no other task's artifact names it),
  and artifact_bytes falls by its size then. A team whose last task record goes, with no token
  and no setting, is forgotten in the same step.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/runs"
--- @include "includes/idempotency"
--- @include "includes/teams"
local S = deployment(KEYS, ARGV)
local tasksKey, byStatusKey, retentionKey = S.key.tasks, S.key.tasks_by_status, S.key.retention
local idempotencyKey, claimsKey, progressKey, statsKey = S.key.idempotency, S.key.claims, S.key.progress, S.key.stats
local limit = tonumber(ARGV[6])

local artifactsKey, indexKey = S.key.artifacts, S.key.artifact_index
local usageKey, blobsKey = S.key.artifact_usage, S.key.artifact_blobs
local artifactBudget = tonumber(ARGV[7])

-- The task's artifact descriptions deleted; the blob keys they freed appended to `freed`.
-- Returns how many descriptions and how many bytes of blobs went.
local function dropArtifacts(taskId, freed)
  local members = rcall('ZRANGEBYLEX', indexKey, prefixRange(taskId))
  local bytes = 0
  for _, raw in ipairs(#members > 0 and rcall('HMGET', artifactsKey, unpack(members)) or {}) do
    if raw then
      local artifact = cjson.decode(raw)
      if rcall('SREM', blobsKey, artifact.blob) == 1 then
        freed[#freed + 1] = artifact.blob
        bytes = bytes + artifact.size
      end
    end
  end
  if #members > 0 then
    rcall('HDEL', artifactsKey, unpack(members))
    rcall('ZREM', indexKey, unpack(members))
  end
  rcall('HDEL', usageKey, taskId)
  return #members, bytes
end

local now = nowMs()
local deleted = 0
local taken = 0
local described = 0
local freedBytes = 0
local reply = {0, 0, 0}
local due = rcall('ZRANGEBYSCORE', retentionKey, '-inf', now, 'LIMIT', 0, limit)
for _, taskId in ipairs(due) do
  if described >= artifactBudget then
    break
  end
  taken = taken + 1
  rcall('ZREM', retentionKey, taskId)
  local task = getJson(tasksKey, taskId)
  local keepUntil = task and TERMINAL_STATUSES[task.status] and runKeepsUntil(S, task, now, S.retentionMs)
  if keepUntil then
    rcall('ZADD', retentionKey, keepUntil, taskId)
  elseif task and TERMINAL_STATUSES[task.status] then
    rcall('HDEL', tasksKey, taskId)
    rcall('ZREM', byStatusKey, taskId)
    rcall('HDEL', progressKey, taskId)
    if task.idempotency_key then
      forgetIdempotent(idempotencyKey, task)
    end
    for _, claimField in ipairs(task.claims or {}) do
      rcall('HDEL', claimsKey, claimField)
    end
    if task.kind == 'session' then  -- its relay (includes/sessions.lua)
      rcall('DEL', derived(S, 'commands', taskId), derived(S, 'command_log', taskId),
            derived(S, 'command_queue', taskId), derived(S, 'command_events', taskId))
      rcall('ZREM', S.key.session_deadlines, taskId)
    end
    forgetRunTask(S, task)
    unnameTeam(S, teamOf(task), 'tasks')  -- its team's last task gone: the team may be forgotten
    local dropped, bytes = dropArtifacts(taskId, reply)
    described = described + dropped
    freedBytes = freedBytes + bytes
    deleted = deleted + 1
  end
end
if deleted > 0 then
  rcall('HINCRBY', statsKey, 'purged', deleted)
end
if freedBytes > 0 then
  rcall('HINCRBY', statsKey, 'artifact_bytes', -freedBytes)
end
reply[2] = deleted
reply[3] = taken
return reply
