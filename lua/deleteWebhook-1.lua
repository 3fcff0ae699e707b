--[[
  Remove a webhook: no event is appended for it from this step on, and its deliveries' records
  go with it (deliveries of it still in the outbox or due for a retry are dropped as they are
  taken, lua/takeDeliveries).

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] webhook id
  Keys it touches:
    webhooks            hash  webhook id -> webhook JSON
    webhook_secrets     hash  webhook id -> its signing secret
    webhook_routes      hash  event kind -> JSON [{id, team}]
    webhook_deliveries  hash  delivery id -> delivery JSON
  Output:
    {0, webhook JSON}
    {NOT_FOUND}

  Invariant: a removed webhook is on no route, so nothing new is appended for it.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/webhooks"
local S = deployment(KEYS, ARGV)
local webhooksKey, secretsKey, routesKey = S.key.webhooks, S.key.webhook_secrets, S.key.webhook_routes
local deliveriesKey = S.key.webhook_deliveries

local webhook = getJson(webhooksKey, ARGV[6])
if not webhook then
  return {E.NOT_FOUND}
end
routeWebhook(routesKey, webhook, false)
rcall('HDEL', webhooksKey, webhook.id)
rcall('HDEL', secretsKey, webhook.id)
local recent = derived(S, 'webhook_recent', webhook.id)
local listed = rcall('ZRANGE', recent, 0, -1)
if #listed > 0 then
  rcall('HDEL', deliveriesKey, unpack(listed))
end
rcall('DEL', recent)
return {0, cjson.encode(webhook)}
