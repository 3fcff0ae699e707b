--[[
  Reaper: go on with what a step left past its bounds (includes/placement.lua): first the devices
  a step could not feed (`refresh_devices`, at most a step's bound of feeds a call), then the
  waiting work of a team whose placement stopped at its bound (placeTeamWork): one slice of one
  team a call, so no call holds Redis for longer than a slice.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
  The indexes this sweep reads: refresh_devices (device id -> since when it waits), placing_teams
  (team -> the target where its placement resumes).
  Output:
    {0, 1 when it did anything, else 0}

  Cost: at most DEVICE_FEEDS_PER_STEP (2) devices fed, each O(targets indexed under its labels +
  teams waiting for those it fits), or one slice (at most TEAM_TARGETS_PER_STEP of the team's
  targets read, TEAM_PLACEMENTS_PER_STEP placed). Bench row 14 (10,000 devices, 100,000 queued):
  p50 about 0.6 ms (1.1 ms with 4 feeds a call).
  Invariant: a team leaves placing_teams once a slice ends with the team at its quota or each of
  its targets read (a device freed meanwhile fed itself by the order, so nothing read before the
  slice's offset needs reading again); otherwise it stays, with the offset to resume at.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/placement"
local S = deployment(KEYS, ARGV)

local now = nowMs()
if refreshWaitingDevices(S, now, DEVICE_FEEDS_PER_STEP) > 0 then
  return {0, 1}
end
local resume = rcall('ZRANGE', S.key.placing_teams, 0, 0, 'WITHSCORES')
if #resume == 0 then
  return {0, 0}
end
placeTeamWork(S, resume[1], now, tonumber(resume[2]))
return {0, 1}
