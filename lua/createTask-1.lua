--[[
  Create a task and, in the same step, reserve a matching free device for it or queue it.

  Input:
    KEYS[1], ARGV[1..5]  the deployment (includes/deployment.lua): tasks key, settings, key base
    ARGV[6]     task JSON built by the service: id, kind, goal | workflow, max_steps,
                max_attempts, queue_timeout_ms, target_device | (driver, labels),
                idempotency_key? with its request_hash, created_by (the operator's name)
                and creator_token (its token id; absent for the bootstrap admin)
    ARGV[7]     at most this many of a selector's devices are read as a queued task's candidates
    ARGV[8]     actor: the operator's name, on every event of this step
    ARGV[9]     actor id: its token's id ("admin" for the bootstrap token), on the same events
  Keys it touches besides those of its includes:
    task_seq     string  counter giving every task its age
    teams, team_names  its team named: one more task record (includes/teams.lua, nameTeam)
    idempotency  hash    "<token id>\0<idempotency key>" -> task id (includes/idempotency.lua)
  Output:
    {0, task JSON, 1, candidates?}  created; when it was queued, why it waits: its candidates
                                    as includes/candidates.lua counts them (the answer needs
                                    them, and they are read in this step at no extra round trip)
    {0, task JSON, 0}  an earlier task with the same idempotency key and the same request, from
                       the same token (a key is its token's: another token's is another request)
    {IDEMPOTENCY_CONFLICT, task id}  same token and idempotency key, different request

  Commands, a create on a free pinned device (bench/footprint.py, row 8a: 16 with the FCALL), each
  for a reason:
    TIME              the clock every process agrees on (deadlines, ages)
    INCR task_seq     the task's age: listings newest first, queues oldest first
    XADD feed         `created`, so the live feed never misses a task
    HMGET teams       the team's cap and devices held: a team at its quota waits (sharing)
    HGET devices      the pinned device's record: its host, driver, status
    HMGET host_state:<host>  whether its host is online now (its last heartbeat against TIME) and
                      runs this kind of task (a workflow it lists): one read of the host
    ZREM free_devices:<driver>  taking the device: answers whether it was free in the same command
                      (then a ZREM of each of its labels' free sets; a selector's task instead
                      intersects its driver's and its labels' free sets: includes/placement.lua,
                      findDeviceFor)
    HSET reservations the device's holder, which release and the candidates read
    HINCRBY teams     the team's devices held, which its quota and its share are judged by
    RPUSH assigned:<host>   the host's queue, which its claim pops
    ZADD claim_deadlines    an assignment nobody claims goes back
    XADD feed         `assigned`: a second event, as the feed's contract lists them
    ZRANGEBYSCORE polls:<host>  a waiting poll to wake (a wake-up is pushed only when one waits)
    ZADD tasks_by_status    the status listing
    HSET tasks        the record, carrying its history

  Invariant: a task is stored, indexed, given its queue deadline and placed (assigned or
  waiting) in one step, so no observer ever sees a task that is neither; its history starts
  with `created`, which names its actor.
]]
--- @include "includes/common"
--- @include "includes/deployment"
--- @include "includes/events"
--- @include "includes/placement"
--- @include "includes/candidates"
--- @include "includes/tasks"
--- @include "includes/idempotency"
local S = deployment(KEYS, ARGV)
setActor(S, ARGV[8], ARGV[9])

local task = cjson.decode(ARGV[6])
local now = nowMs()

if task.idempotency_key then
  local existing = findIdempotent(S.key.idempotency, S.key.tasks, task)
  if existing then
    if existing.request_hash ~= task.request_hash then
      return {E.IDEMPOTENCY_CONFLICT, existing.id}
    end
    return {0, cjson.encode(existing), 0}
  end
  rcall('HSET', S.key.idempotency, idempotencyField(task), task.id)
end
nameTeam(S, teamOf(task), 'tasks', 1)  -- its team is listed while the task is kept

local encoded = startTask(S, task, now)
if task.status == 'queued' then
  return {0, encoded, 1, waitingCandidates(S, task, tonumber(ARGV[7]), now)}
end
return {0, encoded, 1}
