--[[
  Wake-ups of waiting long-polls (DESIGN.md, "Long-poll"): a poll that found its host's
  `assigned` list empty registers "a poll of host H waits on process P" in `polls:<host>`; an
  assignment to H pushes H onto the inbox of each such process, whose one loop blocks on it
  (the coordinator's inbox loop) and wakes its polls of H.

  The same two functions serve a live session's waits, under a topic of the session in place of
  the host id (includes/sessions.lua: `commands><task>`, `answers><task>`; '>' is no id character,
  so a topic is never a host's id).

  Functions (each takes the deployment, includes/deployment.lua, first):
    registerPoll(S, hostId, processId, waitMs, now)  a poll of the host waits on the process
    wakePolls(S, hostId, now)                        an assignment wakes the host's polls

  Invariants kept: a poll registers in the same step that found its host's list empty, and an
  assignment wakes every registration made before it, so no wake-up is lost; a wake-up goes only
  to a process holding a live registration of the host; both keys expire (a registration with its
  longest wait, an inbox INBOX_TTL after its last push), so a crashed process leaves nothing for
  long. A spurious wake-up is harmless: the claim script decides.
]]
--- @include "includes/common"
--- @include "includes/deployment"

-- Register a poll of the host on the process until `now + waitMs`, and keep the key at least as
-- long as its longest registration.
local function registerPoll(S, hostId, processId, waitMs, now)
  local polls = derived(S, 'polls', hostId)
  rcall('ZADD', polls, now + waitMs, processId)
  if rcall('PTTL', polls) < waitMs then
    rcall('PEXPIRE', polls, waitMs)
  end
end

-- Wake the polls of a host that registered as waiting: push the host id onto the inbox of each
-- process holding one. The registrations are used up; a poll that still finds nothing registers
-- again.
local function wakePolls(S, hostId, now)
  local polls = derived(S, 'polls', hostId)
  local processes = rcall('ZRANGEBYSCORE', polls, now, '+inf')
  if #processes == 0 then
    return
  end
  rcall('DEL', polls)
  for _, process in ipairs(processes) do
    local inbox = derived(S, 'inbox', process)
    rcall('RPUSH', inbox, hostId)
    rcall('PEXPIRE', inbox, S.inboxTtlMs)
  end
end
