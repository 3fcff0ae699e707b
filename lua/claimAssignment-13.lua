--[[
  Claim the oldest assignment queued for a host: move it to running under a fresh lease.

  Input:
    KEYS[1..9]  the scheduling keys (includes/schedule.lua)
    KEYS[10]    leases           hash  lease id -> {task_id, host_id, attempt, device_id, claim}
    KEYS[11]    lease_deadlines  zset  lease id -> expiry (ms)
    KEYS[12]    claims           hash  "host id\0claim id" -> the assignment JSON it returned
    KEYS[13]    revoked_tokens   set   SHA-256 digests of revoked host tokens
    ARGV[1..2]  the scheduling arguments
    ARGV[3]     host id
    ARGV[4]     claim id chosen by the agent, or "" for none
    ARGV[5]     lease id for a new lease (minted by the service)
    ARGV[6]     lease TTL (ms)
    ARGV[7]     SHA-256 of the credential the request came with (revocation is bound to it)
  Output:
    {0, assignment JSON}  claimed now, or the same assignment again for a repeated claim id
                          whose lease is live, extended to a full TTL from now
    {0, false}            nothing queued for this host, or a repeated claim id whose lease has
                          ended (expired, replaced, or its result recorded)
    {REVOKED}

  Invariants: an assignment is handed out at most once (removed from `assigned` in the step that
  creates its lease); a repeated claim id returns what the first call returned and claims nothing
  more, so a lost response orphans no work; the answer's lease_expires_at_ms is always a full TTL
  ahead, so an agent that counts the lease from the answer it finally got is never late; an ended
  lease is never revived.
]]
--- @include "includes/common"
--- @include "includes/schedule"
local S = scheduler(KEYS, ARGV)
local leasesKey = KEYS[10]
local deadlinesKey = KEYS[11]
local claimsKey = KEYS[12]
local revokedKey = KEYS[13]
local hostId = ARGV[3]
local claimId = ARGV[4]
local leaseId = ARGV[5]
local ttl = tonumber(ARGV[6])
local credential = ARGV[7]

if rcall('SISMEMBER', revokedKey, credential) == 1 then
  return {E.REVOKED}
end

local claimField = indexMember(hostId, claimId)
if claimId ~= '' then
  local earlier = rcall('HGET', claimsKey, claimField)
  if earlier then
    local assignment = cjson.decode(earlier)
    local leased = getJson(S.tasks, assignment.task_id)
    local deadline = rcall('ZSCORE', deadlinesKey, assignment.lease_id)
    local now = nowMs()
    if not leased or leased.status ~= 'running' or leased.lease_id ~= assignment.lease_id
        or not deadline or tonumber(deadline) <= now then
      return {0, false}
    end
    rcall('ZADD', deadlinesKey, now + ttl, assignment.lease_id)
    assignment.lease_ttl_ms = ttl
    assignment.lease_expires_at_ms = now + ttl
    local encoded = cjson.encode(assignment)
    rcall('HSET', claimsKey, claimField, encoded)
    return {0, encoded}
  end
end

local low, high = prefixRange(hostId)
local member = rcall('ZRANGEBYLEX', S.assigned, low, high, 'LIMIT', 0, 1)[1]
if not member then
  return {0, false}
end
rcall('ZREM', S.assigned, member)

local now = nowMs()
local task = getJson(S.tasks, splitMember(member)[3])
local previous = task.status
task.status = 'running'
task.lease_id = leaseId
task.started_at = now
task.updated_at = now
saveTask(S, task, previous)

local lease = {task_id = task.id, host_id = hostId, attempt = task.attempt, device_id = task.device_id}
if claimId ~= '' then
  lease.claim = claimField
end
putJson(leasesKey, leaseId, lease)
rcall('ZADD', deadlinesKey, now + ttl, leaseId)

local assignment = {
  task_id = task.id,
  attempt = task.attempt,
  lease_id = leaseId,
  lease_ttl_ms = ttl,
  lease_expires_at_ms = now + ttl,
  device_id = task.device_id,
  kind = task.kind,
  goal = task.goal,
  workflow = task.workflow,
  max_steps = task.max_steps,
}
local encoded = cjson.encode(assignment)
if claimId ~= '' then
  rcall('HSET', claimsKey, claimField, encoded)
end
return {0, encoded}
