--[[
  The deployment a script runs in: its keys and its settings, as one table `S` that every
  function of the includes takes first (so nothing in them reads KEYS or ARGV).

  The one rule for keys, which every script of lua/ keeps (coordinator/state/scripts.py refuses a
  script that breaks it, so none loads):
    - a script takes one key, KEYS[1], the deployment's `tasks` key, and so is named `verbNoun-1`;
      that key names the slot the call runs on (Redis Cluster included);
    - the deployment comes first in ARGV, the same five values for every script (below), and the
      script's own arguments begin at ARGV[6];
    - the script builds `S` once, with `local S = deployment(KEYS, ARGV)`, and reads KEYS nowhere
      else: every key it touches is derived from the key base, `S.key.<name>` for a fixed key and
      `derived(S, kind, id)` for a key of one id. The base carries the deployment's hash tag, so
      every derived key lives in the slot KEYS[1] names.
  So a key is named one way, in one place (coordinator/state/keys.py), and a script's header lists
  the keys it touches under "Keys it touches", never as KEYS. (An upgrade script names the keys of
  the earlier layout it reads, which keys.py no longer names, as `S.base .. name`: only there.)

  The deployment's ARGV (coordinator/state/script_calls.py, Deployment):
    KEYS[1] tasks: the deployment's task records
    ARGV[1] host offline threshold (ms since last heartbeat)
    ARGV[2] how long a process's inbox lives after a wake-up is pushed onto it (ms)
    ARGV[3] key base: the deployment's prefix and ':' (`tether:{default}:`)
    ARGV[4] claim timeout (ms)
    ARGV[5] retention of terminal tasks (ms)

  Functions:
    deployment(KEYS, ARGV)  the table S
    derived(S, kind, id)    the key of one host, driver, device or process

  Keys, named once, in coordinator/state/keys.py; the names arrive generated as KEY_NAMES and KEY_KINDS
  (coordinator/state/scripts.py, lua_constants), and docs/redis-keys.md documents each:
    S.key.<name>             a fixed key of the deployment: base .. name (`S.key.hosts_online`)
    derived(S, kind, id)     a key of one id: base .. kind .. ':' .. id (`derived(S, 'assigned',
                             hostId)`), so an operator reads each with one redis-cli command

  Invariants kept: every key a script touches is base .. a name of keys.py (an unknown name or
  kind is an error, never a key of its own); KEYS[1] is the deployment's own `tasks` key, so the
  call is routed to the slot of the keys it touches.
]]

-- The fixed keys of one base, each built on first use: a script touches a few of them.
local function fixedKeys(base)
  return setmetatable({}, {__index = function(built, name)
    local suffix = KEY_NAMES[name]
    if not suffix then
      error('no key named ' .. tostring(name) .. ' in coordinator/state/keys.py')
    end
    local key = base .. suffix
    built[name] = key
    return key
  end})
end

local function deployment(keys, args)
  local S = {
    offlineAfterMs = tonumber(args[1]),
    inboxTtlMs = tonumber(args[2]),
    base = args[3],
    claimTimeoutMs = tonumber(args[4]),
    retentionMs = tonumber(args[5]),
    key = fixedKeys(args[3]),
    -- how many devices this step may still feed (includes/placement.lua, refreshDevice): the rest
    -- wait in `refresh_devices` for the reaper, so no step's time grows with a host's devices
    -- (DEVICE_FEEDS_PER_STEP: coordinator/state/scripts.py)
    feedsLeft = DEVICE_FEEDS_PER_STEP,
  }
  if keys[1] ~= S.key.tasks then
    error('KEYS[1] must be the tasks key of the key base ' .. tostring(args[3]))
  end
  return S
end

-- The key of one host, driver, device or process (base .. kind .. ':' .. id).
local function derived(S, kind, id)
  local name = KEY_KINDS[kind]
  if not name then
    error('no key kind ' .. tostring(kind) .. ' in coordinator/state/keys.py')
  end
  return S.base .. name .. ':' .. id
end
