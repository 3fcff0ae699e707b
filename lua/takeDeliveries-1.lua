--[[
  Take deliveries to attempt now, for one coordinator process (coordinator/webhooks.py): first
  the outbox's entries a dead process held past the visibility timeout (XAUTOCLAIM), then new
  entries (XREADGROUP, in the one consumer group), then retries that are due. A retry taken is
  held: its due time moves a visibility timeout ahead, so no other process takes it meanwhile,
  and one whose process died comes due again.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] the outbox's consumer group
    ARGV[7] this process's consumer name
    ARGV[8] at most this many deliveries
    ARGV[9] visibility timeout (ms)
    ARGV[10] deliveries listed per webhook (wire.WEBHOOK_DELIVERIES_KEPT)
    ARGV[11] forget the group's consumers idle longer than this (ms) with nothing pending: the
            processes that stopped (each process is a consumer of its own); 0 forgets none
  Keys it touches:
    webhook_outbox      stream  one entry per delivery: webhook, type, subject, at
    webhook_retries     zset    delivery id -> when it may be taken (ms)
    webhook_deliveries  hash    delivery id -> delivery JSON {id, webhook_id, event,
                                subject, created_at, attempts, last_status, last_error,
                                next_attempt_at, state}
    webhooks            hash    webhook id -> webhook JSON
    webhook_secrets     hash    webhook id -> its signing secret
  Output:
    {0, then for each delivery taken: delivery JSON, outbox entry id ("" for a retry),
     webhook JSON, secret}

  Invariants: a delivery is held by one process at a time (an outbox entry in the group's
  pending list, a retry by its due time), until it is settled (lua/settleDelivery) or its
  holder stops renewing it by being alive; a delivery's id is its outbox entry's id, the same for
  every attempt; a delivery of a removed webhook is dropped, never attempted.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/webhooks"
local S = deployment(KEYS, ARGV)
local outboxKey, retriesKey = S.key.webhook_outbox, S.key.webhook_retries
local deliveriesKey, webhooksKey, secretsKey = S.key.webhook_deliveries, S.key.webhooks, S.key.webhook_secrets
local group, consumer, limit, visibilityMs = ARGV[6], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local kept = tonumber(ARGV[10])

local now = nowMs()
local reply = {0}
local taken = 0

local function hand(record, entryId)
  local webhook = rcall('HGET', webhooksKey, record.webhook_id)
  if not webhook then
    return false
  end
  reply[#reply + 1] = cjson.encode(record)
  reply[#reply + 1] = entryId
  reply[#reply + 1] = webhook
  reply[#reply + 1] = rcall('HGET', secretsKey, record.webhook_id) or ''
  taken = taken + 1
  return true
end

local function fromOutbox(entry)
  if type(entry) ~= 'table' then  -- an entry deleted while pending (Redis before 7)
    return
  end
  local entryId, fields = entry[1], {}
  for i = 1, #entry[2], 2 do
    fields[entry[2][i]] = entry[2][i + 1]
  end
  local deliveryId = 'd_' .. entryId
  local record = getJson(deliveriesKey, deliveryId)
  if not record and rcall('HEXISTS', webhooksKey, fields.webhook) == 1 then
    record = {id = deliveryId, webhook_id = fields.webhook, event = fields.type, subject = fields.subject,
              created_at = tonumber(fields.at) or now, attempts = 0, state = 'pending'}
    keepRecent(S, deliveriesKey, record, kept)
  end
  if not record or not hand(record, entryId) then
    rcall('XACK', outboxKey, group, entryId)
    rcall('XDEL', outboxKey, entryId)
  end
end

-- Held past the visibility timeout by a process that died (or is stuck): taken over. An error
-- means no group: no webhook was ever registered here (lua/createWebhook makes it), so there is
-- nothing to read, and an idle deployment is left as it was.
local claimed = redis.pcall('XAUTOCLAIM', outboxKey, group, consumer, visibilityMs, '0-0', 'COUNT', limit)
if not claimed.err then
  local forgetIdleMs = tonumber(ARGV[11])
  if forgetIdleMs > 0 then
    for _, info in ipairs(rcall('XINFO', 'CONSUMERS', outboxKey, group)) do
      local fields = {}
      for i = 1, #info, 2 do
        fields[info[i]] = info[i + 1]
      end
      if fields.name ~= consumer and tonumber(fields.pending) == 0 and tonumber(fields.idle) > forgetIdleMs then
        rcall('XGROUP', 'DELCONSUMER', outboxKey, group, fields.name)
      end
    end
  end
  for _, entry in ipairs(claimed[2]) do
    fromOutbox(entry)
  end
  if taken < limit then
    local read = rcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', limit - taken, 'STREAMS', outboxKey, '>')
    for _, entry in ipairs(streamEntries(read)) do
      fromOutbox(entry)
    end
  end
end

if taken < limit then
  for _, deliveryId in ipairs(rcall('ZRANGEBYSCORE', retriesKey, '-inf', now, 'LIMIT', 0, limit - taken)) do
    local record = getJson(deliveriesKey, deliveryId)
    if record and hand(record, '') then
      rcall('ZADD', retriesKey, now + visibilityMs, deliveryId)
    else
      rcall('ZREM', retriesKey, deliveryId)
      rcall('HDEL', deliveriesKey, deliveryId)
    end
  end
end
return reply
