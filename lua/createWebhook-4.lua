--[[
  Register a webhook: an endpoint told of the events it names (PROTOCOL.md, "Webhooks").

  Input:
    KEYS[1] webhooks         hash   webhook id -> {id, url, events, team, created_at, created_by}
    KEYS[2] webhook_secrets  hash   webhook id -> its signing secret (read by delivery only)
    KEYS[3] webhook_routes   hash   event kind -> JSON [{id, team}] of the webhooks that want it
    KEYS[4] webhook_outbox   stream the deliveries to make; its consumer group is created here
    ARGV[1] webhook id
    ARGV[2] JSON {url, events, team?} as the service validated it
    ARGV[3] the signing secret
    ARGV[4] at most this many webhooks (wire.WEBHOOKS_MAX)
    ARGV[5] actor: the operator's name
    ARGV[6] the outbox's consumer group
  Output:
    {0, webhook JSON}  (never the secret)
    {WEBHOOK_LIMIT}    as many webhooks as allowed exist already; nothing changed

  Invariants: a webhook's record, secret and routes are written in one step, so an event is
  either delivered to it with its secret or not appended for it at all; never more webhooks than
  ARGV[4]; the secret is kept apart from the record, so no listing reads it.
]]
--- @include "includes/common"
--- @include "includes/webhooks"
local webhooksKey, secretsKey, routesKey, outboxKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

if rcall('HLEN', webhooksKey) >= tonumber(ARGV[4]) then
  return {E.WEBHOOK_LIMIT}
end
local webhook = cjson.decode(ARGV[2])
webhook.id = ARGV[1]
webhook.created_at = nowMs()
webhook.created_by = ARGV[5]
putJson(webhooksKey, webhook.id, webhook)
rcall('HSET', secretsKey, webhook.id, ARGV[3])
routeWebhook(routesKey, webhook, true)
-- The group reads the outbox from its start; it exists already after the first webhook (BUSYGROUP).
redis.pcall('XGROUP', 'CREATE', outboxKey, ARGV[6], '0', 'MKSTREAM')
return {0, cjson.encode(webhook)}
