--[[
  Webhooks' own bookkeeping (PROTOCOL.md, "Webhooks"; coordinator/webhooks.py delivers): which
  webhooks want each event, and each delivery's record among its webhook's latest.

  Functions:
    routeWebhook(routesKey, webhook, add)   add or take the webhook's routes (`webhook_routes`:
                                            per event kind, the webhooks that want it, with their
                                            team filter), which includes/events.lua reads
    streamEntries(reply)                    the entries of an XREADGROUP reply of one stream
    keepRecent(S, deliveriesKey, record, kept)  a new delivery's record, listed among its
                                            webhook's latest `kept`
    settledRecord(S, deliveriesKey, record) save a record, or drop it if it ended and is no
                                            longer among its webhook's latest

  Invariants kept: `webhook_routes` lists a webhook under exactly the kinds it wants, while it
  exists; a webhook lists its latest deliveries, at most `kept`, and a delivery's record lives
  while it is listed or still pending (so retention is bounded, and nothing pending is forgotten).
]]
--- @include "includes/common"
--- @include "includes/deployment"

local function routeWebhook(routesKey, webhook, add)
  for _, kind in ipairs(webhook.events) do
    local raw = rcall('HGET', routesKey, kind)
    local routes = raw and cjson.decode(raw) or {}
    local kept = {}
    for _, route in ipairs(routes) do
      if route.id ~= webhook.id then
        kept[#kept + 1] = route
      end
    end
    if add then
      kept[#kept + 1] = {id = webhook.id, team = webhook.team}
    end
    if #kept == 0 then
      rcall('HDEL', routesKey, kind)
    else
      rcall('HSET', routesKey, kind, cjson.encode(kept))
    end
  end
end

-- Real Redis answers XREADGROUP with a list of streams, each {name, entries} (nil: nothing new);
-- fakeredis answers the one stream's {name, entries} bare. Either way, the entries.
local function streamEntries(reply)
  if type(reply) ~= 'table' or #reply == 0 then
    return {}
  end
  if type(reply[1]) == 'table' then
    return reply[1][2]
  end
  return reply[2]
end

local function keepRecent(S, deliveriesKey, record, kept)
  local recent = derived(S, 'webhook_recent', record.webhook_id)
  putJson(deliveriesKey, record.id, record)
  rcall('ZADD', recent, record.created_at, record.id)
  local over = rcall('ZCARD', recent) - kept
  if over > 0 then
    for _, old in ipairs(rcall('ZRANGE', recent, 0, over - 1)) do
      local oldRecord = getJson(deliveriesKey, old)
      if oldRecord and oldRecord.state ~= 'pending' then
        rcall('HDEL', deliveriesKey, old)
      end
    end
    rcall('ZREMRANGEBYRANK', recent, 0, over - 1)
  end
end

local function settledRecord(S, deliveriesKey, record)
  if record.state ~= 'pending'
      and not rcall('ZSCORE', derived(S, 'webhook_recent', record.webhook_id), record.id) then
    rcall('HDEL', deliveriesKey, record.id)
  else
    putJson(deliveriesKey, record.id, record)
  end
end
