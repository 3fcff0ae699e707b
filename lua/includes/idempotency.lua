--[[
  Idempotency keys (PROTOCOL.md, "Conventions"): a key belongs to the token that used it, as a
  Stripe key belongs to its API key, so the same key from another token is another request: it
  never answers that token's task or run, nor a conflict with it. The `idempotency` hash (tasks)
  and `run_idempotency` (runs) map "<token id>\0<key>" to the task or run created with it, the
  token id being the record's `creator_token` ('' for the bootstrap admin). (An earlier
  version's entry was the bare key: lua/upgradeIdempotencyKeys moves each as a process starts.)

  Functions:
    idempotencyField(record)                      the field a task's or run's key is kept under
    findIdempotent(indexKey, recordsKey, record)  the earlier record that the same token created
                                                  with the same key, or nil
    forgetIdempotent(indexKey, record)            the record's entry deleted, if it still names
                                                  the record

  Invariant kept: an entry names a record its own token created with its key; no token's create
  reads another token's entry.
]]
--- @include "includes/common"

local function idempotencyField(record)
  return (record.creator_token or '') .. '\0' .. record.idempotency_key
end

local function findIdempotent(indexKey, recordsKey, record)
  local existingId = rcall('HGET', indexKey, idempotencyField(record))
  return existingId and getJson(recordsKey, existingId) or nil
end

local function forgetIdempotent(indexKey, record)
  local field = idempotencyField(record)
  if rcall('HGET', indexKey, field) == record.id then
    rcall('HDEL', indexKey, field)
  end
end
