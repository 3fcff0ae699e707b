--[[
  Count one failed credential from a client address, and throttle the address after a burst:
  more than ARGV[1] failures within ARGV[2] ms make its failures refused (429) for ARGV[3] ms.
  Called only once a credential was found invalid, so a valid one never reaches it.

  Input:
    KEYS[1] auth_failures:<address>   string  failures counted in the address's current window;
                                              its TTL is what is left of the window
    KEYS[2] auth_throttled:<address>  string  present while the address is throttled; its TTL is
                                              what is left of the throttle
    ARGV[1] failures allowed in one window (before the throttle starts)
    ARGV[2] window (ms), from the first failure counted in it
    ARGV[3] how long the throttle lasts (ms)
  Output:
    {0, 0, 0}                 not throttled: answer the failure 401
    {0, ms left, began 0|1}   throttled (1: by this very failure): answer 429 with Retry-After

  Invariants: both keys always carry a TTL, so an address that stops failing leaves nothing
  behind; the throttle begins exactly once per burst, whichever process counted the failure that
  crossed the line (that process alone logs it); failures while throttled are not counted, so
  the next window starts afresh when the throttle ends.
]]
--- @include "includes/common"
local failuresKey = KEYS[1]
local throttledKey = KEYS[2]
local allowed, windowMs, throttleMs = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

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
