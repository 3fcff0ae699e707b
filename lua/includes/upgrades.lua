--[[
  What the upgrade scripts share (coordinator/state/upgrades.py lists them): a walk through a
  hash, a batch a call, that runs once. Its cursor is kept in `upgrades` under the upgrade's name
  between calls, and "done" once the walk has ended, after which a call costs one read.

  Functions:
    walkHash(S, name, hashKey, batch, visit)  one batch of the walk `name` through `hashKey`
        (HSCAN from the kept cursor, COUNT batch): visit(field, value) for each entry; returns how
        many entries it walked and whether the walk is done (now, or before this call)

  Invariant kept: every entry of the hash from the walk's first call to its last is visited at
  least once (HSCAN's guarantee), and the walk is marked done only by the call that ends it.
]]
--- @include "includes/common"
--- @include "includes/deployment"

local function walkHash(S, name, hashKey, batch, visit)
  local cursor = rcall('HGET', S.key.upgrades, name)
  if cursor == 'done' then
    return 0, true
  end
  local reply = rcall('HSCAN', hashKey, cursor or '0', 'COUNT', batch)
  local fields = reply[2]
  for i = 1, #fields, 2 do
    visit(fields[i], fields[i + 1])
  end
  local done = reply[1] == '0'
  rcall('HSET', S.key.upgrades, name, done and 'done' or reply[1])
  return #fields / 2, done
end
