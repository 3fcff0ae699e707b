--[[
  Read the Redis clock as every script reads it (includes/common.lua, nowMs): what the operator
  API's reads compare expiries and deadlines with, so a read and a script never disagree on
  whether something has passed.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
  Keys it touches: none. KEYS[1] routes the call to the node holding the deployment (on a
  cluster, that node's clock is the scripts').
  Output:
    {0, now (ms)}

  Invariant: reads only.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV) -- luacheck: ignore 211 (it checks KEYS[1] is this deployment's, and reads nothing)
return {0, nowMs()}
