--[[
  Reaper: delete terminal tasks whose retention has passed, with everything hanging off them:
  the record (which carries its history and its leases), its index entries, its idempotency key,
  its progress and its claim records.

  Input:
    KEYS[1] tasks            hash  task id -> task JSON
    KEYS[2] tasks_by_status  zset  task id -> its status and age
    KEYS[3] retention        zset  task id -> when it is deleted (ms); the index this sweep reads
    KEYS[4] idempotency      hash  idempotency key -> task id
    KEYS[5] claims           hash  "host id\0claim id" -> assignment JSON
    KEYS[6] progress         hash  task id -> latest progress JSON
    KEYS[7] stats            hash  deployment-wide counters
    ARGV[1] at most this many tasks per call
  Output:
    {0, number of tasks deleted}

  Invariants: only terminal tasks are deleted, each once; afterwards no key of the deployment
  names the task (so a late result or renewal for it finds no lease: lease_not_owned), and an
  idempotency key pointing at a newer task is left alone.
]]
--- @include "includes/common"
local tasksKey = KEYS[1]
local byStatusKey = KEYS[2]
local retentionKey = KEYS[3]
local idempotencyKey = KEYS[4]
local claimsKey = KEYS[5]
local progressKey = KEYS[6]
local statsKey = KEYS[7]
local limit = tonumber(ARGV[1])

local TERMINAL = {succeeded = true, failed = true, cancelled = true}

local now = nowMs()
local deleted = 0
sweepDue(retentionKey, tasksKey, now, limit, function(taskId, task)
  if task and TERMINAL[task.status] then
    rcall('HDEL', tasksKey, taskId)
    rcall('ZREM', byStatusKey, taskId)
    rcall('HDEL', progressKey, taskId)
    if task.idempotency_key and rcall('HGET', idempotencyKey, task.idempotency_key) == taskId then
      rcall('HDEL', idempotencyKey, task.idempotency_key)
    end
    for _, claimField in ipairs(task.claims or {}) do
      rcall('HDEL', claimsKey, claimField)
    end
    deleted = deleted + 1
  end
end)
if deleted > 0 then
  rcall('HINCRBY', statsKey, 'purged', deleted)
end
return {0, deleted}
