--[[
  Register a webhook: an endpoint told of the events it names (PROTOCOL.md, "Webhooks").

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] webhook id
    ARGV[7] JSON {url, events, team?} as the service validated it
    ARGV[8] the signing secret
    ARGV[9] at most this many webhooks (wire.WEBHOOKS_MAX)
    ARGV[10] actor: the operator's name
    ARGV[11] the outbox's consumer group
  Keys it touches:
    webhooks         hash   webhook id -> {id, url, events, team, created_at, created_by}
    webhook_secrets  hash   webhook id -> its signing secret (read by delivery only)
    webhook_routes   hash   event kind -> JSON [{id, team}] of the webhooks that want it
    webhook_outbox   stream the deliveries to make; its consumer group is created here
  Output:
    {0, webhook JSON}  (never the secret)
    {WEBHOOK_LIMIT}    as many webhooks as allowed exist already; nothing changed

  Invariants: a webhook's record, secret and routes are written in one step, so an event is
  either delivered to it with its secret or not appended for it at all; never more webhooks than
  ARGV[9]; the secret is kept apart from the record, so no listing reads it.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/webhooks"
local S = deployment(KEYS, ARGV)
local webhooksKey, secretsKey, routesKey = S.key.webhooks, S.key.webhook_secrets, S.key.webhook_routes
local outboxKey = S.key.webhook_outbox

if rcall('HLEN', webhooksKey) >= tonumber(ARGV[9]) then
  return {E.WEBHOOK_LIMIT}
end
local webhook = cjson.decode(ARGV[7])
webhook.id = ARGV[6]
webhook.created_at = nowMs()
webhook.created_by = ARGV[10]
putJson(webhooksKey, webhook.id, webhook)
rcall('HSET', secretsKey, webhook.id, ARGV[8])
routeWebhook(routesKey, webhook, true)
-- The group reads the outbox from its start; it exists already after the first webhook (BUSYGROUP).
redis.pcall('XGROUP', 'CREATE', outboxKey, ARGV[11], '0', 'MKSTREAM')
return {0, cjson.encode(webhook)}
