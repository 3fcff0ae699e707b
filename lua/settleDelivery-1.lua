--[[
  Record one attempt of a delivery (coordinator/webhooks.py) and decide what follows: delivered
  (a 2xx), tried again after a delay, or failed once retrying would pass the delivery's time to
  live. A delivery its process could not start (its endpoint already at its concurrency) is
  deferred: due again after the delay, no attempt counted, its deferrals counted (the caller
  backs off on them).

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] the outbox's consumer group
    ARGV[7] delivery id
    ARGV[8] its outbox entry id, "" when it was taken as a retry
    ARGV[9] outcome: "delivered", "retry" or "defer"
    ARGV[10] the HTTP status answered, 0 for none (timeout, refused connection, ...)
    ARGV[11] what went wrong, short ("" for nothing): never the body, never the URL
    ARGV[12] delay before the next attempt (ms)
    ARGV[13] retried for at most this long after the event (ms)
  Keys it touches:
    webhook_outbox      stream  the outbox (an entry is acknowledged and deleted here)
    webhook_retries     zset    delivery id -> when it may be taken (ms)
    webhook_deliveries  hash    delivery id -> delivery JSON
  Output:
    {0, state}  pending, delivered or failed ("gone" when the delivery no longer exists)

  Invariants: an outbox entry leaves the outbox (acknowledged) in the step that records its
  attempt and schedules what follows, so it is never both retried and in the outbox; a delivered
  or failed delivery is never attempted again.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/webhooks"
local S = deployment(KEYS, ARGV)
local outboxKey, retriesKey, deliveriesKey = S.key.webhook_outbox, S.key.webhook_retries, S.key.webhook_deliveries
local group, deliveryId, entryId, outcome = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local status, problem, delayMs, ttlMs = tonumber(ARGV[10]), ARGV[11], tonumber(ARGV[12]), tonumber(ARGV[13])

if entryId ~= '' then
  rcall('XACK', outboxKey, group, entryId)
  rcall('XDEL', outboxKey, entryId)
end
local record = getJson(deliveriesKey, deliveryId)
if not record or record.state ~= 'pending' then
  rcall('ZREM', retriesKey, deliveryId)
  return {0, record and record.state or 'gone'}
end
local now = nowMs()
if outcome == 'defer' then
  record.deferrals = (record.deferrals or 0) + 1
else
  record.attempts = record.attempts + 1
  record.last_attempt_at = now
  record.last_status = status > 0 and status or nil
  record.last_error = problem ~= '' and problem or nil
end
if outcome == 'delivered' then
  record.state = 'delivered'
  record.delivered_at = now
elseif now + delayMs > record.created_at + ttlMs then
  record.state = 'failed'
else
  record.next_attempt_at = now + delayMs
  rcall('ZADD', retriesKey, record.next_attempt_at, deliveryId)
end
if record.state ~= 'pending' then
  record.next_attempt_at = nil
  rcall('ZREM', retriesKey, deliveryId)
end
settledRecord(S, deliveriesKey, record)
return {0, record.state}
