--[[
  Idempotency keys (PROTOCOL.md, "Conventions"): a key belongs to the token that used it, as a
  Stripe key belongs to its API key, so the same key from another token is another request: it
  never answers that token's task or run, nor a conflict with it. The `idempotency` hash (tasks)
  and `run_idempotency` (runs) map "<token id>\0<key>" to the task or run created with it, the
  token id being the record's `creator_token` ('' for the bootstrap admin). An earlier version's
  entry is the bare key: it still answers the token that created its record, and only that one,
  until retention deletes it.

  Functions:
    idempotencyField(record)                      the field a task's or run's key is kept under
    findIdempotent(indexKey, recordsKey, record)  the earlier record that the same token created
                                                  with the same key, or nil
    forgetIdempotent(indexKey, record)            the record's entry deleted (either form), if it
                                                  still names the record

  Invariant kept: an entry names a record its own token created with its key; no token's create
  reads another token's entry.
]]
--- @include "includes/common"

local function idempotencyField(record)
  return (record.creator_token or '') .. '\0' .. record.idempotency_key
end

local function findIdempotent(indexKey, recordsKey, record)
  local existingId = rcall('HGET', indexKey, idempotencyField(record))
  if existingId then
    return getJson(recordsKey, existingId)
  end
  existingId = rcall('HGET', indexKey, record.idempotency_key)  -- an earlier version's entry
  local existing = existingId and getJson(recordsKey, existingId)
  if existing and existing.creator_token == record.creator_token then
    return existing
  end
  return nil
end

local function forgetIdempotent(indexKey, record)
  for _, field in ipairs({idempotencyField(record), record.idempotency_key}) do
    if rcall('HGET', indexKey, field) == record.id then
      rcall('HDEL', indexKey, field)
    end
  end
end
