--[[
  Count one failed credential from a client address, and throttle the address after a burst:
  more than ARGV[6] failures within ARGV[7] ms make its failures refused (429) for ARGV[8] ms.
  Called only once a credential was found invalid, so a valid one never reaches it.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6] the client address (IPv4, or an IPv6 /64), as its keys name it
    ARGV[7] failures allowed in one window (before the throttle starts)
    ARGV[8] window (ms), from the first failure counted in it
    ARGV[9] how long the throttle lasts (ms)
  Keys it touches:
    auth_failures:<address>   string  failures counted in the address's current window;
                                      its TTL is what is left of the window
    auth_throttled:<address>  string  present while the address is throttled; its TTL is
                                      what is left of the throttle
  Output:
    {0, 0, 0}                 not throttled: answer the failure 401
    {0, ms left, began 0|1}   throttled (1: by this very failure): answer 429 with Retry-After

  Invariants: both keys always carry a TTL, so an address that stops failing leaves nothing
  behind; the throttle begins exactly once per burst, whichever process counted the failure that
  crossed the line (that process alone logs it); failures while throttled are not counted, so
  the next window starts afresh when the throttle ends.
]]
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local failuresKey = derived(S, 'auth_failures', ARGV[6])
local throttledKey = derived(S, 'auth_throttled', ARGV[6])
local allowed, windowMs, throttleMs = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

local left = rcall('PTTL', throttledKey)
if left > 0 then
  return {0, left, 0}
end
local failures = rcall('INCR', failuresKey)
if failures == 1 or rcall('PTTL', failuresKey) < 0 then
  rcall('PEXPIRE', failuresKey, windowMs)
end
if failures <= allowed then
  return {0, 0, 0}
end
rcall('SET', throttledKey, '1', 'PX', throttleMs)
rcall('DEL', failuresKey)
return {0, throttleMs, 1}
