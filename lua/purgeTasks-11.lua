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
    KEYS[1] tasks            hash  task id -> task JSON
    KEYS[2] tasks_by_status  zset  task id -> its status and age
    KEYS[3] retention        zset  task id -> when it is deleted (ms); the index this sweep reads
    KEYS[4] idempotency      hash  "<token id>\0<idempotency key>" -> task id
                                   (includes/idempotency.lua)
    KEYS[5] claims           hash  "host id\0claim id" -> assignment JSON
    KEYS[6] progress         hash  task id -> latest progress JSON
    KEYS[7] stats            hash  deployment-wide counters
    KEYS[8] artifacts        hash  "task id\0attempt\0name" -> description JSON
    KEYS[9] artifact_index   zset  "task id\0attempt\0name", score 0 (lex)
    KEYS[10] artifact_usage  hash  task id -> bytes of its artifacts
    KEYS[11] artifact_blobs  set   blob keys some description names
    ARGV[1] at most this many tasks per call
    ARGV[2] take no further task once this many artifact descriptions were deleted (bounds the
            call's work; the tasks left stay due for the next call)
    ARGV[3] key base: the deployment's prefix and ':', which a run's keys (runs, runs_by_age,
            run_idempotency, run_counts:<run>, run_tasks:<run>) and a team's (teams, team_names,
            team_usage:<team>: includes/teams.lua, unnameTeam) are derived from, as the
            scheduling scripts derive them (includes/deployment.lua)
    ARGV[4] retention of terminal tasks (ms), for a task whose run ended later than it did
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
local tasksKey, byStatusKey, retentionKey, idempotencyKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local claimsKey, progressKey, statsKey = KEYS[5], KEYS[6], KEYS[7]
local limit = tonumber(ARGV[1])
local retentionMs = tonumber(ARGV[4])

local artifactsKey, indexKey, usageKey, blobsKey = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local artifactBudget = tonumber(ARGV[2])
-- What the runs include reads of a deployment: its key base and fixed keys.
local S = {base = ARGV[3], key = fixedKeys(ARGV[3])}

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
  local keepUntil = task and TERMINAL_STATUSES[task.status] and runKeepsUntil(S, task, now, retentionMs)
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
