--[[
  Record an artifact's description, once its bytes are in the blob store: the lease checked as a
  renewal checks it, then the name's earlier description (a replay, or a conflict), then the
  task's caps.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..10]  the lease the request presents: host id, lease id, task id, attempt, SHA-256 of the
                 credential it came with (includes/common.lua, requestLease)
    ARGV[11]  artifact name
    ARGV[12]  size (bytes)
    ARGV[13]  SHA-256 of the bytes (hex)
    ARGV[14]  content type
    ARGV[15] step index, or "" for none
    ARGV[16] blob key in the blob store
    ARGV[17] at most this many bytes of artifacts per task
    ARGV[18] at most this many artifacts per task
  Keys it touches:
    tasks, lease_deadlines, revoked_tokens  the lease's check (includes/common.lua, requestLease)
    artifacts        hash  "task id\0attempt\0name" -> description JSON
    artifact_index   zset  "task id\0attempt\0name", score 0 (lex)
    artifact_usage   hash  task id -> bytes of its artifacts
    artifact_blobs   set   blob keys some description names
    stats            hash  deployment-wide counters (artifact_bytes)
    feed             stream the deployment's live feed
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
  most COORDINATOR_MAX_TASK_ARTIFACTS (ARGV[18]); every other upload costs what it did.

  Invariants: a description is written only under the task's current, unexpired lease, and only
  while the task's artifacts stay within both caps; a name of an attempt, once described, never
  changes; every blob a description names is in artifact_blobs, and artifact_bytes counts each
  such blob once. Nothing is written on any failure, nor on a replay. The lease is not renewed.
  A new artifact is published on the feed (type `artifact`; not in the task's history, which
  keeps transitions only), so watchers see it as it arrives.
]]
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local artifactsKey, indexKey = S.key.artifacts, S.key.artifact_index
local usageKey, blobsKey, statsKey, feedKey = S.key.artifact_usage, S.key.artifact_blobs, S.key.stats, S.key.feed
local hostId, taskId, attempt = ARGV[6], ARGV[8], tonumber(ARGV[9])
local name, size, sha256, contentType = ARGV[11], tonumber(ARGV[12]), ARGV[13], ARGV[14]
local stepIndex, blob, maxBytes, maxCount = tonumber(ARGV[15]), ARGV[16], tonumber(ARGV[17]), tonumber(ARGV[18])

local now = nowMs()
local _, lease, failure = requestLease(S, ARGV, now)
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
  local task = getJson(S.key.tasks, taskId)
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
