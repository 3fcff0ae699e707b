--[[
  Record an artifact's description, once its bytes are in the blob store: the lease checked as a
  renewal checks it, then the name's earlier description (a replay, or a conflict), then the
  task's caps.

  Input:
    KEYS[1] tasks            hash  task id -> task JSON
    KEYS[2] lease_deadlines  zset  task id -> its running lease's expiry (ms)
    KEYS[3] revoked_tokens   set   SHA-256 digests of revoked host tokens
    KEYS[4] artifacts        hash  "task id\0attempt\0name" -> description JSON
    KEYS[5] artifact_index   zset  "task id\0attempt\0name", score 0 (lex)
    KEYS[6] artifact_usage   hash  task id -> bytes of its artifacts
    KEYS[7] artifact_blobs   set   blob keys some description names
    KEYS[8] stats            hash  deployment-wide counters (artifact_bytes)
    KEYS[9] feed             stream the deployment's live feed
    ARGV[1]  host id
    ARGV[2]  lease id
    ARGV[3]  task id
    ARGV[4]  attempt
    ARGV[5]  SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[6]  artifact name
    ARGV[7]  size (bytes)
    ARGV[8]  SHA-256 of the bytes (hex)
    ARGV[9]  content type
    ARGV[10] step index, or "" for none
    ARGV[11] blob key in the blob store
    ARGV[12] at most this many bytes of artifacts per task
    ARGV[13] at most this many artifacts per task
  Output:
    {0, description JSON, replayed (0|1), blob key, blob key, ...}  the blob keys a live
                        session's dropped screens freed, for the caller to delete from the store
    {LEASE_NOT_OWNED} | {LEASE_REPLACED} | {LEASE_EXPIRED} | {REVOKED}  as a renewal answers
    {ARTIFACT_CONFLICT} this attempt has the name already, with other bytes
    {ARTIFACT_LIMIT}    the task's artifacts would pass a cap (a live session's: only an
                        artifact larger than the byte cap by itself)

  A live session (PROTOCOL.md, "Live sessions") uploads a screen per command for as long as it
  runs: over a cap, its oldest artifacts are dropped to make room (their descriptions deleted,
  their blobs answered), never the upload refused. That path reads the task's descriptions, at
  most COORDINATOR_MAX_TASK_ARTIFACTS (ARGV[13]); every other upload costs what it did.

  Invariants: a description is written only under the task's current, unexpired lease, and only
  while the task's artifacts stay within both caps; a name of an attempt, once described, never
  changes; every blob a description names is in artifact_blobs, and artifact_bytes counts each
  such blob once. Nothing is written on any failure, nor on a replay. The lease is not renewed.
  A new artifact is published on the feed (type `artifact`; not in the task's history, which
  keeps transitions only), so watchers see it as it arrives.
]]
--- @include "includes/common"
local artifactsKey, indexKey, usageKey, blobsKey = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local statsKey, feedKey = KEYS[8], KEYS[9]
local hostId, taskId, attempt = ARGV[1], ARGV[3], tonumber(ARGV[4])
local name, size, sha256, contentType = ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9]
local stepIndex, blob, maxBytes, maxCount = tonumber(ARGV[10]), ARGV[11], tonumber(ARGV[12]), tonumber(ARGV[13])

local now = nowMs()
local _, lease, failure = requestLease(KEYS, ARGV, now)
if not lease then
  return {failure}
end
local member = indexMember(taskId, tostring(attempt), name)
local earlier = rcall('HGET', artifactsKey, member)
if earlier then
  if cjson.decode(earlier).sha256 == sha256 then
    return {0, earlier, 1}
  end
  return {E.ARTIFACT_CONFLICT}
end
local used = tonumber(rcall('HGET', usageKey, taskId) or '0')
local stored = rcall('ZLEXCOUNT', indexKey, prefixRange(taskId))
local reply = {0, '', 0}
if used + size > maxBytes or stored >= maxCount then
  local task = getJson(KEYS[1], taskId)
  if task.kind ~= 'session' or size > maxBytes then
    return {E.ARTIFACT_LIMIT}
  end
  -- The session's oldest first, until the new one fits both caps.
  local members = rcall('ZRANGEBYLEX', indexKey, prefixRange(taskId))
  local held = {}
  for i, raw in ipairs(rcall('HMGET', artifactsKey, unpack(members))) do
    if raw then
      held[#held + 1] = {member = members[i], artifact = cjson.decode(raw)}
    end
  end
  table.sort(held, function(a, b) return a.artifact.created_at < b.artifact.created_at end)
  local freedBytes = 0
  for _, old in ipairs(held) do
    if used + size <= maxBytes and stored < maxCount then
      break
    end
    rcall('HDEL', artifactsKey, old.member)
    rcall('ZREM', indexKey, old.member)
    used, stored = used - old.artifact.size, stored - 1
    rcall('HINCRBY', usageKey, taskId, -old.artifact.size)
    if rcall('SREM', blobsKey, old.artifact.blob) == 1 then
      reply[#reply + 1] = old.artifact.blob
      freedBytes = freedBytes + old.artifact.size
    end
  end
  if freedBytes > 0 then
    rcall('HINCRBY', statsKey, 'artifact_bytes', -freedBytes)
  end
end
local description = cjson.encode({
  name = name, attempt = attempt, step_index = stepIndex, size = size, sha256 = sha256,
  content_type = contentType, created_at = now, blob = blob,
})
rcall('HSET', artifactsKey, member, description)
rcall('ZADD', indexKey, 0, member)
rcall('HINCRBY', usageKey, taskId, size)
if rcall('SADD', blobsKey, blob) == 1 then
  rcall('HINCRBY', statsKey, 'artifact_bytes', size)
end
rcall('XADD', feedKey, 'MAXLEN', '~', FEED_EVENTS_KEPT, '*', 'e', cjson.encode({
  type = 'artifact', at = now, task_id = taskId, attempt = attempt, host_id = hostId, device_id = lease.device_id,
  name = name, step_index = stepIndex, size = size, content_type = contentType,
}))
reply[2] = description
return reply
