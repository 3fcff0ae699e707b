"""Every Redis key name of one deployment, built in one place (documented in docs/redis-keys.md).

All keys share one prefix that carries a hash tag (``tether:{default}``), so every script's keys
hash to one slot and the same code runs on Redis Cluster. Most of the layout is a fixed set of
keys (records in hashes, indexes in sorted sets), named base + name. The rest are keys of one
host, driver, device or process, named base + kind + ":" + id, each what an operator reads with
one redis-cli command (a host's queued assignments with LRANGE, a driver's waiting tasks with
ZRANGE). The scheduling scripts derive both from the base they are given, as they carry the hash
tag and so live in the same slot: the names they use are generated from this module as the
library loads (``lua_key_names``), so the two sides cannot differ.
"""

from __future__ import annotations

# tasks_by_status scores a task by its status and age: code * STATUS_SPAN + seq, so each status is
# one score range in age order (lua/includes/common.lua ``statusScore``; a test keeps them equal).
# 2^48: any seq fits below it, and every score is an exact double.
STATUS_CODES = {"queued": 1, "assigned": 2, "running": 3, "succeeded": 4, "failed": 5, "cancelled": 6}
STATUS_SPAN = 2**48


def hash_tag(key: str) -> str | None:
    """The part of ``key`` that Redis Cluster hashes to pick its slot, when it is not the whole
    key: between the first ``{`` and the first ``}`` after it, if that is not empty. Every key of
    a deployment starts with its prefix, so a prefix with a tag puts them all in one slot."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1:end] if end > start + 1 else None


# The kinds of the keys of one id (base + kind + ":" + id): each is the name of the Keys method
# that builds it, and the name the scripts derive it by (lua/includes/deployment.lua ``derived``).
PER_ID_KINDS = ("device_runs", "assigned", "waiting", "target_teams", "team_targets", "device_targets",
                "driver_targets", "label_targets", "free_devices", "free_label", "pooled_label", "team_usage",
                "host_state", "host_devices", "lease", "polls", "inbox", "auth_failures", "auth_throttled",
                "run_counts", "run_tasks", "webhook_recent", "commands", "command_log", "command_queue",
                "command_events")


def commands_topic(task_id: str) -> str:
    """What a session's host poll waits on (``polls:<topic>``, pushed onto inboxes): no host id,
    as '>' is no id character (lua/includes/sessions.lua)."""
    return f"commands>{task_id}"


def answers_topic(task_id: str) -> str:
    """What operators waiting on one of a session's commands wait on."""
    return f"answers>{task_id}"


def team_queue(target_id: str, team: str) -> str:
    """The id of one team's queue for one target: ``waiting:t17|checkout``."""
    return f"{target_id}|{team}"


def _escape_label(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in "%|=" else c for c in text)


def label_index(driver: str, name: str, value: str) -> str:
    """The id of a driver's index by one label (``free_label``, ``label_targets``):
    ``<driver>|<name>=<value>``, with ``%``, ``|`` and ``=`` in a name or value written as ``%XX``
    (lua/includes/pool.lua, labelIndex), so no two labels share one."""
    return f"{driver}|{_escape_label(name)}={_escape_label(value)}"


class Keys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        p = prefix + ":"
        # tasks
        self.tasks = p + "tasks"
        self.task_seq = p + "task_seq"
        self.tasks_by_status = p + "tasks_by_status"
        self.idempotency = p + "idempotency"
        # runs: many tasks as one (lua/includes/runs.lua)
        self.runs = p + "runs"  # run id -> run JSON
        self.run_seq = p + "run_seq"
        self.runs_by_age = p + "runs_by_age"  # run id -> its seq: the listing, newest first
        self.run_idempotency = p + "run_idempotency"  # a run's idempotency key -> run id
        # scheduling
        self.devices = p + "devices"
        self.reservations = p + "reservations"
        # placement's indexes (lua/includes/placement.lua): the targets tasks wait for, interned
        self.targets = p + "targets"  # target id -> {target_device | driver, labels; workflow}
        self.target_ids = p + "target_ids"  # a target's spec key -> its id
        self.target_seq = p + "target_seq"
        self.placing_teams = p + "placing_teams"  # team -> where its placement resumes (a slice's end)
        self.placement_scratch = p + "placement_scratch"  # a create's intersection, deleted in its step
        self.refresh_devices = p + "refresh_devices"  # device -> since when: fed by the reaper (a step's bound)
        self.hosts_online = p + "hosts_online"
        self.devices_by_driver = p + "devices_by_driver"
        self.disabled_devices = p + "disabled_devices"
        # sharing: per team its settings, devices held and tasks queued (lua/includes/teams.lua)
        self.teams = p + "teams"
        # every team named and not forgotten, by name (score 0, lex): the teams listing's pages
        self.team_names = p + "team_names"
        # deadlines (the reaper's sweeps)
        self.queue_deadlines = p + "queue_deadlines"
        self.claim_deadlines = p + "claim_deadlines"
        self.retention = p + "retention"
        # upgrades of the layout that walk a key (lua/upgradeDeviceRuns): name -> cursor, or "done"
        self.upgrades = p + "upgrades"
        # live sessions (lua/includes/sessions.lua): running session -> its next deadline (ms)
        self.session_deadlines = p + "session_deadlines"
        # history: the live feed (a capped stream) and deployment-wide counters
        self.feed = p + "feed"
        self.stats = p + "stats"
        # leases (each lease lives in its task's record, `leases`)
        self.lease_deadlines = p + "lease_deadlines"  # task id -> its running lease's expiry
        self.claims = p + "claims"
        self.progress = p + "progress"
        # artifacts: their descriptions (the bytes live in the blob store, coordinator/blobs/folder.py)
        self.artifacts = p + "artifacts"
        self.artifact_index = p + "artifact_index"
        self.artifact_usage = p + "artifact_usage"
        self.artifact_blobs = p + "artifact_blobs"
        # hosts and credentials
        self.hosts = p + "hosts"
        self.host_ids = p + "host_ids"
        self.host_seen = p + "host_seen"
        self.host_snapshots = p + "host_snapshots"
        self.revoked_tokens = p + "revoked_tokens"  # digests of revoked host credentials
        self.host_tokens = p + "host_tokens"
        self.enrollment_tokens = p + "enrollment_tokens"
        self.enrollment_token_hashes = p + "enrollment_token_hashes"
        self.enrollment_tokens_by_age = p + "enrollment_tokens_by_age"
        self.enrollments = p + "enrollments"
        self.local_devices = p + "local_devices"
        self.enrolled_devices = p + "enrolled_devices"
        # operator tokens (the bootstrap admin token is configuration, not a key)
        self.operator_tokens = p + "operator_tokens"
        self.operator_token_hashes = p + "operator_token_hashes"  # digests of unrevoked tokens
        self.operator_tokens_by_age = p + "operator_tokens_by_age"
        self.operator_tokens_live = p + "operator_tokens_live"  # unrevoked, by expiry
        # webhooks (coordinator/webhooks.py): the registered endpoints (never their secrets), the
        # secrets apart (read by delivery only), which webhooks want each event (what the scripts
        # that end a task read), the outbox stream and its consumer group, retries by due time,
        # and each delivery's record
        self.webhooks = p + "webhooks"
        self.webhook_secrets = p + "webhook_secrets"
        self.webhook_routes = p + "webhook_routes"
        self.webhook_outbox = p + "webhook_outbox"
        self.webhook_retries = p + "webhook_retries"
        self.webhook_deliveries = p + "webhook_deliveries"
        # a random value written once: a process that finds another (or none) knows Redis lost
        # the data its caches mirror (coordinator/state/epoch.py)
        self.epoch = p + "epoch"
        # Keys of one host, driver, device or process are this base plus a kind and
        # the id (the methods below): the scripts derive them, and they carry the hash tag too.
        self.base = p

    def _of(self, kind: str, id_: str) -> str:
        return f"{self.base}{kind}:{id_}"

    def device_runs(self, device_id: str) -> str:
        """A device's ended runs: a list of run JSON, newest first, capped."""
        return self._of("device_runs", device_id)

    def assigned(self, host_id: str) -> str:
        """The task ids assigned to a host and not claimed yet: a list, in order."""
        return self._of("assigned", host_id)

    def waiting(self, queue: str) -> str:
        """One team's queued tasks for one target (``queue``: ``team_queue(target id, team)``): a
        zset task id -> score, highest priority first, then oldest (lua/includes/placement.lua,
        queueScore). Every task in it asks the same of a device, so its first is the one a device
        that fits the target takes."""
        return self._of("waiting", queue)

    def target_teams(self, target_id: str) -> str:
        """The teams with tasks waiting for one target: a zset team -> its queue's first score."""
        return self._of("target_teams", target_id)

    def team_targets(self, team: str) -> str:
        """The targets one team has tasks waiting for: a zset target id -> its queue's first
        score, so the team's waiting work reads in PROTOCOL's order across its targets."""
        return self._of("team_targets", team)

    def device_targets(self, device_id: str) -> str:
        """The waiting targets aimed at one device: a set of target ids."""
        return self._of("device_targets", device_id)

    def driver_targets(self, driver: str) -> str:
        """The waiting targets of a driver that ask for no label: a set of target ids."""
        return self._of("driver_targets", driver)

    def label_targets(self, index: str) -> str:
        """The waiting targets of a driver indexed by one label (``label_index``; the target's
        rarest among the pool as it was interned): a set of target ids. A freed device reads
        those of its own labels."""
        return self._of("label_targets", index)

    def free_devices(self, driver: str) -> str:
        """A driver's free devices: a zset device id -> when it became free (ms), idle longest
        first."""
        return self._of("free_devices", driver)

    def pooled_label(self, index: str) -> str:
        """A driver's pooled devices with one label (``label_index``): a zset device id -> 0, so a
        selector's matching devices are one intersection, in id order (its candidates)."""
        return self._of("pooled_label", index)

    def free_label(self, index: str) -> str:
        """A driver's free devices with one label (``label_index``): a zset as ``free_devices``;
        a selector's free devices are the intersection of its driver's and its labels'."""
        return self._of("free_label", index)

    def team_usage(self, team: str) -> str:
        """The device time a team's runs used, by the minute they ended, over the last hour: a
        hash minute (ms since the epoch // 60000) -> ms."""
        return self._of("team_usage", team)

    def host_state(self, host_id: str) -> str:
        """What of a host decides whether its devices take work, read by placement in one command
        (lua/includes/pool.lua, hostState): a hash ``seen`` -> its last heartbeat (ms), ``draining``
        -> "1" while an operator drains it, ``stalled`` -> "1" from an assignment's claim timeout to
        its next poll, ``capabilities`` -> its agent's last ``{workflows, planners}`` (absent: it
        sent none and runs any workflow)."""
        return self._of("host_state", host_id)

    def host_devices(self, host_id: str) -> str:
        """The pooled device ids of a host: a set."""
        return self._of("host_devices", host_id)

    def lease(self, task_id: str) -> str:
        """The task's live lease, for people: a string {lease_id, host_id, attempt, progress (its
        latest step, once a renewal sent one)} whose TTL is the lease's time left (``redis-cli
        PTTL``); ``lease_deadlines`` is what the reaper acts on."""
        return self._of("lease", task_id)

    def polls(self, host_id: str) -> str:
        """The processes holding a waiting poll of the host: a zset process id -> until (ms)."""
        return self._of("polls", host_id)

    def inbox(self, process_id: str) -> str:
        """Host ids with new work, pushed for one process's waiting polls: a list."""
        return self._of("inbox", process_id)

    def auth_failures(self, address: str) -> str:
        """Failed credentials from one client address in its current window: a counter whose
        TTL is what is left of the window (coordinator/api/throttle.py)."""
        return self._of("auth_failures", address)

    def auth_throttled(self, address: str) -> str:
        """Present while a client address's failed credentials are answered 429; its TTL is
        what is left of the throttle."""
        return self._of("auth_throttled", address)

    def run_counts(self, run_id: str) -> str:
        """A run's counts, kept by the scripts that change its tasks' statuses
        (lua/includes/runs.lua): a hash "<status>" -> its tasks of that status, "d\0<device>\0<status>"
        and "w\0<work item>\0<status>" -> the same by device and by work item (the breakdown),
        "open" -> its tasks not ended, "stored" -> its task records retention has not deleted."""
        return self._of("run_counts", run_id)

    def run_tasks(self, run_id: str) -> str:
        """A run's tasks, one per place of the run: a zset task id -> its place (0-based); a
        rerun takes the place of the task it replaces."""
        return self._of("run_tasks", run_id)

    def webhook_recent(self, webhook_id: str) -> str:
        """A webhook's latest deliveries (the last WEBHOOK_DELIVERIES_KEPT): a zset delivery id ->
        when its event happened (ms)."""
        return self._of("webhook_recent", webhook_id)

    def commands(self, task_id: str) -> str:
        """A session's commands: a hash command id -> the command JSON, its answer with it."""
        return self._of("commands", task_id)

    def command_log(self, task_id: str) -> str:
        """A session's recording: a zset command id -> its seq, oldest first (the last
        ``wire.SESSION_COMMANDS_KEPT``)."""
        return self._of("command_log", task_id)

    def command_queue(self, task_id: str) -> str:
        """A session's commands not answered yet: a list of command ids, in order (at most
        ``wire.SESSION_COMMANDS_WAITING_MAX``)."""
        return self._of("command_queue", task_id)

    def command_events(self, task_id: str) -> str:
        """A session's command events (``command``, ``command_answered``), oldest first, the last
        ``wire.TASK_EVENTS_KEPT``: kept here, not in the task's record, which every script of a
        command reads (lua/includes/sessions.lua, ``commandEvent``); its history merges both."""
        return self._of("command_events", task_id)

    # Index members, as the scripts build them (lua/includes/common.lua ``indexMember``): fields
    # joined by NUL.

    @staticmethod
    def status_scores(status: str, before_seq: int | None = None) -> tuple[str, int]:
        """ZREVRANGEBYSCORE bounds (max, min) of ``tasks_by_status`` for one status, newest
        first, below ``before_seq`` when given."""
        low = STATUS_CODES[status] * STATUS_SPAN
        return f"({low + (STATUS_SPAN if before_seq is None else before_seq)}", low

    @staticmethod
    def status_seq(score: float) -> int:
        """The task's seq, from its score in ``tasks_by_status``."""
        return int(score) % STATUS_SPAN

    def fixed(self) -> list[str]:
        """The deployment's fixed keys (not those derived from an id): for inspection, never for
        a hot path."""
        return [v for name, v in vars(self).items() if name not in ("prefix", "base")]

    def names(self) -> dict[str, str]:
        """Each fixed key's attribute -> its name after the base (``tasks_by_status``)."""
        return {name: key[len(self.base):] for name, key in vars(self).items() if name not in ("prefix", "base")}


def lua_key_names() -> str:
    """The key names the scripts derive keys by, as Lua (coordinator/state/scripts.py puts it above every
    include): ``KEY_NAMES``, each fixed key's attribute -> its name after the base, and
    ``KEY_KINDS``, the kinds of the keys of one id."""
    fixed = ",\n".join(f"  {name} = '{suffix}'" for name, suffix in Keys("").names().items())
    kinds = ", ".join(f"{kind} = '{kind}'" for kind in PER_ID_KINDS)
    return f"local KEY_NAMES = {{\n{fixed},\n}}\nlocal KEY_KINDS = {{{kinds}}}\n"
