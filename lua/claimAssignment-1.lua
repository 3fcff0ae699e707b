--[[
  Claim the oldest assignment queued for a host: move it to running under a fresh lease.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     host id
    ARGV[7]     claim id chosen by the agent, or "" for none
    ARGV[8]     lease id for a new lease (minted by the service)
    ARGV[9]     lease TTL (ms)
    ARGV[10]    SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[11]    id of the process serving the poll, or "" when the poll will not wait
    ARGV[12]    how long the poll will wait if it finds nothing (ms)
  Keys it touches besides those of its includes:
    lease_deadlines  zset  task id -> its running lease's expiry (ms)
    claims           hash  "host id\0claim id" -> the assignment JSON it returned
    revoked_tokens   set   SHA-256 digests of revoked host tokens
  Output:
    {0, assignment JSON, ms the attempt waited from queued to claimed}  claimed now
    {0, assignment JSON, -1}  the same assignment again for a repeated claim id whose lease is
                              live, extended to a full TTL from now
    {0, false}                nothing queued for this host (the poll is registered in
                              polls:<host> to be woken through its process's inbox), or a
                              repeated claim id whose lease has ended (expired, replaced, or its
                              result recorded)
    {REVOKED}

  Commands, a claim without a claim id that finds an assignment (bench/footprint.py, row 8a: 12
  with the FCALL), each for a reason:
    SISMEMBER revoked_tokens  a revoked credential is refused atomically, on every route
    TIME              the lease's deadline, on the clock every process agrees on
    HDEL host_state:<host> stalled   a poll ends its host's stall (answers whether it was one,
                      in one command)
    LPOP assigned:<host>   the oldest assignment, handed out once
    HGET tasks        the record
    ZREM claim_deadlines   the assignment is claimed: its claim deadline ends
    XADD feed, ZADD tasks_by_status, HSET tasks   `claimed`, the listing, the record
    ZADD lease_deadlines   the lease's deadline, which the reaper acts on
    SET lease:<task>  the lease key with its TTL, for people (DESIGN.md, "Keys are for people")
    ZADD session_deadlines   a session's idle timeout and max duration start (sessions only)

  Invariants: an assignment is handed out at most once (popped from the host's `assigned` list in
  the step that creates its lease); a poll that finds nothing is registered in that same step, so
  an assignment made after it always wakes it; a repeated claim id returns what the first call
  returned and claims nothing more, so a lost response orphans no work; the answer's
  lease_expires_at_ms is always a full TTL ahead, so an agent that counts the lease from the
  answer it finally got is never late; an ended lease is never revived. The live lease is also a
  key of its own, `lease:<task id>` (set with its TTL here, extended by a replay), for people to
  read. A poll is what ends a host's stall (an assignment whose claim timed out): its devices take
  work again in this step.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/dispatch"
--- @include "includes/wakeups"
--- @include "includes/hosts"
local S = deployment(KEYS, ARGV)
local hostId, claimId, leaseId, ttl = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local credential, processId, waitMs = ARGV[10], ARGV[11], tonumber(ARGV[12])

if credentialRevoked(S.key.revoked_tokens, credential) then
  return {E.REVOKED}
end

local claimField = indexMember(hostId, claimId)
if claimId ~= '' then
  local earlier = replayAssignment(S, claimField, hostId, ttl, nowMs())
  if earlier == false then
    return {0, false}
  elseif earlier then
    return {0, earlier, -1}
  end
end

local now = nowMs()
if rcall('HDEL', derived(S, 'host_state', hostId), 'stalled') == 1 then
  resumeHost(S, hostId, now)
end

local taskId = rcall('LPOP', derived(S, 'assigned', hostId))
if not taskId then
  if processId ~= '' and waitMs > 0 then
    registerPoll(S, hostId, processId, waitMs, now)
  end
  return {0, false}
end

local task = getJson(S.key.tasks, taskId)
rcall('ZREM', S.key.claim_deadlines, task.id)
local encoded = dispatchTask(S, task, task.status, hostId, leaseId, ttl, claimId ~= '' and claimField or nil, now)
return {0, encoded, now - task.queued_at}
