"""Every Redis key name of one deployment, built in one place (documented in docs/redis-keys.md).

All keys share one prefix that carries a hash tag (``tether:{default}``), so every script's keys
hash to one slot and the same code runs on Redis Cluster. The layout is a fixed set of keys
(records in hashes, indexes in sorted sets): a script never needs a key it cannot be handed up
front, whichever task, device or host it ends up choosing.
"""

from __future__ import annotations


class Keys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        p = prefix + ":"
        # tasks
        self.tasks = p + "tasks"
        self.task_seq = p + "task_seq"
        self.tasks_by_seq = p + "tasks_by_seq"
        self.tasks_by_status = p + "tasks_by_status"
        self.idempotency = p + "idempotency"
        # scheduling
        self.devices = p + "devices"
        self.reservations = p + "reservations"
        self.free = p + "free"
        self.hosts_online = p + "hosts_online"
        self.waiting_device = p + "waiting_device"
        self.waiting_driver = p + "waiting_driver"
        self.assigned = p + "assigned"
        self.devices_by_driver = p + "devices_by_driver"
        self.disabled_devices = p + "disabled_devices"
        self.hosts_draining = p + "hosts_draining"
        self.hosts_stalled = p + "hosts_stalled"  # did not claim in time; no new work until it polls
        # deadlines (the reaper's sweeps)
        self.queue_deadlines = p + "queue_deadlines"
        self.claim_deadlines = p + "claim_deadlines"
        self.retention = p + "retention"
        # history: the live feed (a capped stream) and deployment-wide counters
        self.feed = p + "feed"
        self.stats = p + "stats"
        # leases
        self.leases = p + "leases"
        self.lease_deadlines = p + "lease_deadlines"
        self.claims = p + "claims"
        self.progress = p + "progress"
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
        # pub/sub channel (not a key): host ids with new assignments
        self.wake_channel = p + "wake"
        # Keys of one task or device are this base plus a kind and the id (task_events:<task id>,
        # device_runs:<device id>): the scripts derive them, and they carry the hash tag too.
        self.base = p

    def task_events(self, task_id: str) -> str:
        """A task's history: a list of event JSON, oldest first, capped."""
        return f"{self.base}task_events:{task_id}"

    def device_runs(self, device_id: str) -> str:
        """A device's runs: a list of run JSON, newest first, capped."""
        return f"{self.base}device_runs:{device_id}"

    # Index members, as the scripts build them (lua/includes/common.lua ``indexMember``): fields
    # joined by NUL, sequence numbers zero-padded so lexicographic order is age order.

    @staticmethod
    def status_range(status: str, before_seq: int | None = None) -> tuple[str, str]:
        """ZREVRANGEBYLEX bounds (high, low) of ``tasks_by_status`` for one status, newest
        first, below ``before_seq`` when given."""
        high = f"({status}\0{before_seq:016d}\0" if before_seq is not None else f"({status}\1"
        return high, f"[{status}\0"

    @staticmethod
    def member_task_id(member: bytes) -> bytes:
        """The task id that ends an index member."""
        return member.rsplit(b"\0", 1)[1]

    def all(self) -> list[str]:
        """Every key of the deployment (the wake-up channel is not a key): for cleanup and
        inspection, never for a hot path."""
        return [v for name, v in vars(self).items() if name not in ("prefix", "wake_channel", "base")]

    @property
    def scheduling(self) -> list[str]:
        """KEYS[1..19] of every script that includes lua/includes/schedule.lua, in its order."""
        return [
            self.tasks,
            self.tasks_by_status,
            self.devices,
            self.reservations,
            self.free,
            self.hosts_online,
            self.waiting_device,
            self.waiting_driver,
            self.assigned,
            self.host_snapshots,
            self.devices_by_driver,
            self.disabled_devices,
            self.hosts_draining,
            self.hosts_stalled,
            self.queue_deadlines,
            self.claim_deadlines,
            self.retention,
            self.feed,
            self.stats,
        ]
