--[[
  Heartbeat: refresh a host's last-seen time and replace exactly its pooled devices with the
  complete snapshot it sent, all or nothing.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     host id
    ARGV[7]     host kind: "static" or "enrolled"
    ARGV[8]     snapshot JSON {agent, devices: [{device_id, driver, status, attributes, labels}]},
                canonical (sorted), with attributes and labels as JSON strings; a byte-equal
                repeat of the stored snapshot from an online host only refreshes last-seen
    ARGV[9]     SHA-256 of the credential the request came with (revocation is bound to it)
    ARGV[10]    the snapshot's agent.capabilities as canonical JSON {workflows, planners}, or ""
                when the agent sent none (it runs any workflow)
  Keys it touches besides those of its includes:
    hosts             hash  host id -> host record JSON
    host_seen         zset  host id -> last heartbeat (ms), never swept
    host_state:<host> hash  its `seen` (the last heartbeat, which placement reads as online),
                            `draining` (answered), `capabilities` (ARGV[10])
    enrolled_devices  hash  device id -> {host_id, local_id, driver}
    revoked_tokens    set   SHA-256 digests of revoked host tokens
    host_ids          zset  every host id with a record (score 0, lexicographic)
  Output:
    {0, draining (0|1)}
    {DEVICE_CONFLICT, device id}  static host: the id belongs to an online host or is enrolled
    {UNKNOWN_DEVICE, device id}   enrolled host: the id is not enrolled to this host
    {DRIVER_CONFLICT, device id}  enrolled host: the driver differs from the enrollment
    {REVOKED}                     the credential is revoked, or (enrolled host) no record of
                                  the host holds it: Redis lost it, whatever a cache said

  Invariants: a rejected snapshot changes nothing (not last-seen, not the pool); other hosts'
  devices and enrollment records are never touched, except that a static device id whose owner
  is offline passes to the new reporter; a device that disappears takes its unclaimed
  assignment back to the queue; a host coming back online publishes `host_online`, and each of
  its free devices takes the oldest waiting task it matches, whether or not a sweep had taken the
  host offline (no task waits beside a device it could run on); a host whose capabilities
  changed has each of its free devices take the oldest waiting task it may now run, the same way,
  and its unclaimed assignments of workflows it no longer lists go back to the queue. A device
  whose labels, driver, host or status changed is offered the waiting work it can run now,
  the same way. Teams that the devices leaving bring back under their quotas are placed once all
  have left, the team with the highest-priority waiting work first (includes/placement.lua,
  beginReleases and placeTeamsBack). At most DEVICE_FEEDS_PER_STEP devices are fed in the step; the rest wait, not
  free, in `refresh_devices` for the reaper (includes/placement.lua, refreshDevice).
  Only enrollment creates an
  enrolled host's record; a static host's is created by its first accepted heartbeat.
  Cost: O(devices reported + previously reported) reads, each device's record and its host's
  state read once; O(labels) index moves for each device whose labels, driver or host changed;
  at most DEVICE_FEEDS_PER_STEP feeds (includes/placement.lua, pickByShare), the others one
  EXISTS each. Bench row 14 (quiet): a host's 10 devices relabelled, 2 fed, p50 1.5 to 1.9 ms,
  max 4.7 ms; 256 at once 26 to 34 ms, against 3.3 to 6.5 ms for only writing the records and
  moving their label indexes (14f).
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/pool"
--- @include "includes/placement"
--- @include "includes/tasks"
local S = deployment(KEYS, ARGV)
local hostId, kind, snapshotJson, credential = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local capabilitiesJson = ARGV[10]

if credentialRevoked(S.key.revoked_tokens, credential) then
  return {E.REVOKED}
end
local now = nowMs()
local stateKey = derived(S, 'host_state', hostId)
local state = rcall('HMGET', stateKey, 'seen', 'draining', 'capabilities')
local wasOnline = isOnline(S, state[1], now)
local draining = state[2] ~= false and 1 or 0
local previousJson = rcall('HGET', S.key.host_snapshots, hostId)
if wasOnline and previousJson == snapshotJson then
  rcall('ZADD', S.key.hosts_online, now, hostId)
  rcall('ZADD', S.key.host_seen, now, hostId)
  rcall('HSET', stateKey, 'seen', now)
  return {0, draining}
end

-- Read before the snapshot is judged: an enrolled host whose record is gone (Redis lost its
-- data; a process's cached credential may not know yet) is an unknown credential, not a host
-- with unknown devices, and must not come back as an empty host. The unchanged-snapshot path
-- above needs no look: the snapshot it compares with is gone with the record.
local hostRecord = getJson(S.key.hosts, hostId)
if kind == 'enrolled' and (not hostRecord or hostRecord.token_digest ~= credential) then
  return {E.REVOKED}
end

local snapshot = cjson.decode(snapshotJson)
local stored = {}  -- device id -> its pooled record as this step found it, or false: read once
for _, reported in ipairs(snapshot.devices) do
  local id = reported.device_id
  local enrolled = getJson(S.key.enrolled_devices, id)
  stored[id] = getJson(S.key.devices, id) or false
  if kind == 'enrolled' then
    if not enrolled or enrolled.host_id ~= hostId then
      return {E.UNKNOWN_DEVICE, id}
    end
    if enrolled.driver ~= reported.driver then
      return {E.DRIVER_CONFLICT, id}
    end
  else
    if enrolled then
      return {E.DEVICE_CONFLICT, id}
    end
    local current = stored[id]
    if current and current.host_id ~= hostId and hostOnline(S, current.host_id, now) then
      return {E.DEVICE_CONFLICT, id}
    end
  end
end

-- An enrolled host's labels (set by the operator through its enrollment token) apply to every
-- device it reports, and win over the agent's own.
local hostLabels = {}
if hostRecord and hostRecord.labels then
  hostLabels = cjson.decode(hostRecord.labels)
end
local function deviceLabels(labelsJson)
  if next(hostLabels) == nil then
    return labelsJson
  end
  local merged = cjson.decode(labelsJson)
  for name, value in pairs(hostLabels) do
    merged[name] = value
  end
  return cjson.encode(merged)
end

-- Devices this host no longer reports leave the pool.
local reportedIds = {}
for _, reported in ipairs(snapshot.devices) do
  reportedIds[reported.device_id] = true
end
-- (Devices let go and teams back under their quotas are fed and placed once all left.)
beginReleases(S)
if previousJson then
  for _, old in ipairs(cjson.decode(previousJson).devices) do
    local id = old.device_id
    local current = not reportedIds[id] and getJson(S.key.devices, id)
    if current and current.host_id == hostId then
      unpoolDevice(S, id, current)
      local holder = rcall('HGET', S.key.reservations, id)
      local task = holder and getJson(S.key.tasks, holder)
      if task and task.status == 'assigned' then
        unassignTask(S, task, now, 'device_gone')
      end
    end
  end
end

settleReleases(S, now)

-- (A device this loop took out is no reported one: each reported record read above is current.)
for _, reported in ipairs(snapshot.devices) do
  local id = reported.device_id
  local record = {
    host_id = hostId,
    driver = reported.driver,
    status = reported.status,
    attributes = reported.attributes,
    labels = deviceLabels(reported.labels),
  }
  poolDevice(S, id, record, stored[id] or nil)
  stored[id] = record
end

rcall('ZADD', S.key.hosts_online, now, hostId)
rcall('ZADD', S.key.host_seen, now, hostId)
rcall('HSET', stateKey, 'seen', now)
rcall('HSET', S.key.host_snapshots, hostId, snapshotJson)
if not hostRecord then
  putJson(S.key.hosts, hostId, {kind = kind, created_at = now})
  rcall('ZADD', S.key.host_ids, 0, hostId)
end
if not wasOnline then
  publish(S, {type = 'host_online', host_id = hostId, at = now})
end
local previousCapabilities = state[3] or ''
if capabilitiesJson == '' then
  rcall('HDEL', stateKey, 'capabilities')
else
  rcall('HSET', stateKey, 'capabilities', capabilitiesJson)
end
local capabilitiesChanged = previousCapabilities ~= capabilitiesJson
-- Assignments this host has not claimed and can no longer run (its agent stopped listing their
-- workflow) go back to the queue, same attempt, for a host that can run them.
if capabilitiesChanged and capabilitiesJson ~= '' then
  local workflows = workflowSet(capabilitiesJson)
  for _, taskId in ipairs(rcall('LRANGE', derived(S, 'assigned', hostId), 0, -1)) do
    local task = getJson(S.key.tasks, taskId)
    if task and not runsTask(workflows, task) then
      unassignTask(S, task, now, 'workflow_unlisted')
    end
  end
end

-- A host that was not online (its deadline passed, swept or not) had no free device in the eyes
-- of placement, so tasks may have queued beside devices the sweep had yet to take out of the free
-- index: each of its devices becomes free anew, and so takes the waiting task the order picks. So
-- does each device of a host whose capabilities changed: a workflow task that waited for a host
-- listing its workflow may run on it now. (A device whose record changed left the free index in
-- poolDevice, and is fed the same way.)
local host = hostState(S, hostId, now)  -- as this step left it: a feed changes none of it
for _, reported in ipairs(snapshot.devices) do
  refreshDevice(S, reported.device_id, now, stored[reported.device_id], false,
    not wasOnline or capabilitiesChanged, host)
end
return {0, draining}
