--[[
  Remove a webhook: no event is appended for it from this step on, and its deliveries' records
  go with it (deliveries of it still in the outbox or due for a retry are dropped as they are
  taken, lua/takeDeliveries).

  Input:
    KEYS[1] webhooks            hash  webhook id -> webhook JSON
    KEYS[2] webhook_secrets     hash  webhook id -> its signing secret
    KEYS[3] webhook_routes      hash  event kind -> JSON [{id, team}]
    KEYS[4] webhook_deliveries  hash  delivery id -> delivery JSON
    ARGV[1] key base (its `webhook_recent:<id>` is derived from it)
    ARGV[2] webhook id
  Output:
    {0, webhook JSON}
    {NOT_FOUND}

  Invariant: a removed webhook is on no route, so nothing new is appended for it.
]]
--- @include "includes/common"
--- @include "includes/webhooks"
local webhooksKey, secretsKey, routesKey, deliveriesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local S = {base = ARGV[1]}

local webhook = getJson(webhooksKey, ARGV[2])
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
