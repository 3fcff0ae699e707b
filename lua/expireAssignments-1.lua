--[[
  Reaper: assignments not claimed within the claim timeout go back to the queue (same attempt,
  event `unassigned` with reason `claim_timeout`), and their host is stalled: its devices take
  no new work, and its other unclaimed assignments go back too, until the host polls again (the
  claim script ends the stall).

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     at most this many deadlines per call
  The index this sweep reads: claim_deadlines.
  Output:
    {0, number of deadlines taken, number of assignments sent back}

  Invariant: a deadline is acted on once (removed in the step that acts); only a task still
  assigned is moved, so a claim that won the race keeps its task. The teams the call's stalled
  hosts bring back under their quotas are placed once all of them are paused, highest-priority
  work first (includes/placement.lua, beginReleases), never host by host.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/hosts"
local S = deployment(KEYS, ARGV)
local limit = tonumber(ARGV[6])

local now = nowMs()
local returned = 0
-- (The devices let go are fed, and the teams back under their quotas placed, once every host of
-- the call is paused: includes/placement.lua, beginReleases.)
beginReleases(S)
local taken = sweepDue(S.key.claim_deadlines, S.key.tasks, now, limit, function(_, task)
  if task and task.status == 'assigned' then
    rcall('HSET', derived(S, 'host_state', task.host_id), 'stalled', 1)
    returned = returned + pauseHost(S, task.host_id, now, 'claim_timeout', false)
  end
end)
settleReleases(S, now)
count(S, 'claim_timeouts', returned)
return {0, taken, returned}
