--[[
  Read the Redis clock as every script reads it (includes/common.lua, nowMs): what the operator
  API's reads compare expiries and deadlines with, so a read and a script never disagree on
  whether something has passed.

  Input:
    KEYS[1] tasks  hash  the deployment's task records, not read: the key routes the call to the
                   node holding the deployment (on a cluster, that node's clock is the scripts')
  Output:
    {0, now (ms)}

  Invariant: reads only.
]]
--- @flags no-writes
--- @include "includes/common"
return {0, nowMs()}
