--[[
  Upgrade: every idempotency entry names its token. Earlier versions kept a task's or a run's
  entry under the bare key (`idempotency`, `run_idempotency`: key -> id); now it is
  "<token id>\0<key>" (includes/idempotency.lua), so the scripts every create runs read one field,
  never the earlier one too. Each bare entry is moved under the field of the record it names (its
  token, its key), or dropped when that record is gone or no longer carries the key. A batch of
  fields per call: the walk goes through `idempotency`, then `run_idempotency`, with HSCAN from
  the cursor kept in `upgrades`, and the call that ends the second marks the upgrade done, after
  which a call costs one read each.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] about this many fields per call (HSCAN's COUNT)
  Keys it touches:
    idempotency      hash  "<token id>\0<key>" (or, earlier, "<key>") -> task id
    run_idempotency  hash  "<token id>\0<key>" (or, earlier, "<key>") -> run id
    tasks, runs      hash  the records the entries name (read)
    upgrades         hash  upgrade name -> the cursor of its walk under way, or "done"
  Output:
    {0, fields walked, 1 when the upgrade is done}

  Invariant: a bare entry still answers the token that created its record, and only that one, as
  the earlier version's did: the entry it is moved to is that token's; an entry of the current
  layout is never overwritten. The walk runs before a process of this version serves; a process
  of the earlier version still running beside it (a rolling upgrade) may write a bare entry after
  the walk passed, which this version does not read: a retry of that create, answered by this
  version, creates anew.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/idempotency"
--- @include "includes/upgrades"
local S = deployment(KEYS, ARGV)

-- One walk's batch: each bare entry moved under its record's field, or dropped.
local function moveBare(name, indexKey, recordsKey)
  return walkHash(S, name, indexKey, tonumber(ARGV[6]), function(field, id)
    if not string.find(field, '\0', 1, true) then
      local record = getJson(recordsKey, id)
      if record and record.idempotency_key == field then
        rcall('HSETNX', indexKey, idempotencyField(record), id)
      end
      rcall('HDEL', indexKey, field)
    end
  end)
end

local walked, done = moveBare('idempotency_keys', S.key.idempotency, S.key.tasks)
if done and walked == 0 then  -- the tasks' walk ended before this call: the runs' batch
  walked, done = moveBare('run_idempotency_keys', S.key.run_idempotency, S.key.runs)
  return {0, walked, done and 1 or 0}
end
return {0, walked, 0}
