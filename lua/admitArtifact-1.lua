--[[
  Whether an artifact upload may store any byte, judged before its body is read: the lease checked
  as a renewal checks it, then the name's earlier description, then the task's caps against the
  declared size. So the refusals that need no byte (an ended lease, a task at its cap, a declared
  size past what the task may still hold) store nothing, and an upload under a name already
  described is only hashed, never stored (it is a replay or a conflict, which lua/recordArtifact
  decides once the bytes' SHA-256 is known). lua/recordArtifact checks everything again as it
  writes: the lease may end and other uploads may land while these bytes stream.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6..10]  the lease the request presents: host id, lease id, task id, attempt, SHA-256 of the
                 credential it came with (includes/common.lua, requestLease)
    ARGV[11] artifact name
    ARGV[12] declared size (bytes), or "" when the body is not declared (chunked)
    ARGV[13] at most this many bytes of artifacts per task
    ARGV[14] at most this many artifacts per task
  Keys it touches:
    tasks, lease_deadlines, revoked_tokens  the lease's check (includes/common.lua, requestLease)
    artifacts        hash  "task id\0attempt\0name" -> description JSON
    artifact_index   zset  "task id\0attempt\0name", score 0 (lex)
    artifact_usage   hash  task id -> bytes of its artifacts
  Output:
    {0, earlier description JSON, 0}  the name is described already: hash the bytes, store none
    {0, "", room}                     store at most room bytes (what the task may still hold)
    {LEASE_NOT_OWNED} | {LEASE_REPLACED} | {LEASE_EXPIRED} | {REVOKED}  as a renewal answers
    {ARTIFACT_LIMIT}                  the task holds its count already, or the declared size
                                      passes what it may still hold (a live session: only a
                                      declared size past the byte cap, as its oldest screens
                                      make room: lua/recordArtifact)

  Invariant: reads only.
]]
--- @flags no-writes
--- @include "includes/common"
--- @include "includes/deployment"
local S = deployment(KEYS, ARGV)
local artifactsKey, indexKey, usageKey = S.key.artifacts, S.key.artifact_index, S.key.artifact_usage
local taskId, attempt, name = ARGV[8], ARGV[9], ARGV[11]
local declared, maxBytes, maxCount = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])

local task, lease, failure = requestLease(S, ARGV, nowMs())
if not lease then
  return {failure}
end
local earlier = rcall('HGET', artifactsKey, indexMember(taskId, attempt, name))
if earlier then
  return {0, earlier, 0}
end
if task.kind == 'session' then  -- its oldest screens make room (lua/recordArtifact)
  return (declared and declared > maxBytes) and {E.ARTIFACT_LIMIT} or {0, '', maxBytes}
end
local room = maxBytes - tonumber(rcall('HGET', usageKey, taskId) or '0')
if rcall('ZLEXCOUNT', indexKey, prefixRange(taskId)) >= maxCount or (declared and declared > room) then
  return {E.ARTIFACT_LIMIT}
end
return {0, '', room}
