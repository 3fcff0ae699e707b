--[[
  What the upgrade scripts share (coordinator/state/upgrades.py lists them): a walk through a
  collection, a batch a call, that runs once. Its cursor is kept in `upgrades` under the upgrade's
  name between calls, and "done" once the walk has ended, after which a call costs one read.

  Functions (each returns how many entries the call walked and whether the walk is done, now or
  before this call):
    walkHash(S, name, hashKey, batch, visit)  one batch of the walk `name` through a hash (HSCAN
        from the kept cursor, COUNT batch): visit(field, value) for each entry
    walkLex(S, name, zsetKey, batch, visit)   one batch of the walk `name` through a sorted set
        of equal scores in lex order (at most `batch` members after the last one walked):
        visit(member) for each

  Invariant kept: every entry there from the walk's first call to its last is visited at least
  once, and the walk is marked done only by the call that ends it.
]]
--- @include "includes/common"
--- @include "includes/deployment"

-- The cursor protocol: `step(cursor)` walks one batch from the kept cursor (nil: the start) and
-- answers how many entries it walked and the cursor to go on from, nil once the walk has ended.
local function walk(S, name, step)
  local cursor = rcall('HGET', S.key.upgrades, name)
  if cursor == 'done' then
    return 0, true
  end
  local walked, onFrom = step(cursor or nil)
  rcall('HSET', S.key.upgrades, name, onFrom or 'done')
  return walked, onFrom == nil
end

local function walkHash(S, name, hashKey, batch, visit)
  return walk(S, name, function(cursor)
    local reply = rcall('HSCAN', hashKey, cursor or '0', 'COUNT', batch)
    local fields = reply[2]
    for i = 1, #fields, 2 do
      visit(fields[i], fields[i + 1])
    end
    return #fields / 2, reply[1] ~= '0' and reply[1] or nil
  end)
end

local function walkLex(S, name, zsetKey, batch, visit)
  return walk(S, name, function(cursor)
    local members = rcall('ZRANGEBYLEX', zsetKey, cursor or '-', '+', 'LIMIT', 0, batch)
    for _, member in ipairs(members) do
      visit(member)
    end
    return #members, #members == batch and '(' .. members[#members] or nil
  end)
end
