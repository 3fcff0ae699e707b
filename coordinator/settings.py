"""Coordinator configuration, from the environment (names are part of the contract)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

import wire
from coordinator.webhook_targets import TargetPolicy, parse_networks

# What redis-py's from_url accepts.
REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")
# The default of ``candidates_scanned``, which the state floor also takes when built without
# settings (the model test, benchmarks). Counting them is most of a queued create's time at fleet
# scale: 300 reached 4.8 to 5.7 ms for a selector of a driver alone (bench row 14), over the 5 ms
# a step may hold Redis; 200, 2.1 to 2.5 ms.
CANDIDATES_SCANNED = 200
MAX_PORT = 65535


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COORDINATOR_", extra="ignore")

    redis_url: SecretStr | None = Field(default=None, validation_alias=AliasChoices("REDIS_URL"))
    # 0 asks the system for a free port. Checked here: the socket layer would wrap 99999 to 34463
    # without a word, and refuse -1 with "Servname not supported".
    port: int = Field(default=8000, validation_alias=AliasChoices("PORT"))
    key_prefix: str = "tether:{default}"
    admin_token: SecretStr | None = None
    static_hosts: dict[str, SecretStr] = Field(default_factory=dict)
    lease_ttl_s: float = Field(default=60.0, gt=0)
    heartbeat_interval_s: float = Field(default=15.0, gt=0)
    host_offline_after_s: float = Field(default=45.0, gt=0)
    claim_wait_default_s: float = Field(default=25.0, ge=0)
    claim_wait_max_s: float = Field(default=60.0, ge=0)
    progress_summary_max_chars: int = Field(default=wire.PROGRESS_SUMMARY_MAX_CHARS, gt=0)
    # Renewals may carry a screenshot pushed into progress by a careless agent: read it, reject
    # the progress and still renew, rather than fail the renewal with 413.
    max_renew_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    # Bodies over max_body_bytes (renewals) this process reads and parses at once; more wait
    # their turn (coordinator/api/body_slots.py), so their memory stays bounded.
    max_concurrent_large_bodies: int = Field(default=1, gt=0)
    max_devices_per_host: int = Field(default=256, gt=0)
    max_body_bytes: int = Field(default=65536, gt=0)
    # Live (unrevoked, unexpired) operator tokens at most: each is a credential someone holds.
    max_operator_tokens: int = Field(default=1000, gt=0)
    header_timeout_s: float = Field(default=10.0, gt=0)
    # A request body not complete this long after its head gets 408 request_timeout and its
    # connection closed (coordinator/api/boundary.py): a slow body holds no connection for long.
    body_timeout_s: float = Field(default=30.0, gt=0)
    # After SIGTERM, requests in flight get this long to finish; any still running then is
    # answered 503 unavailable with Retry-After (coordinator/api/boundary.py).
    graceful_timeout_s: int = Field(default=5, ge=1)  # whole seconds, as uvicorn and gunicorn take it
    # Managed Redis often presents a self-signed certificate on rediss://; this accepts it.
    redis_tls_insecure: bool = False
    # Connections per process (per node on a cluster), whatever the number of waiting polls or
    # feed watchers: two of them block, one on the wake-up inbox and one on the feed.
    redis_max_connections: int = Field(default=8, ge=3)
    # On a single node, the script calls and reads that requests issue in one turn of the event
    # loop share one write to Redis (coordinator/transport/autopipeline.py), and the wake-up inbox's pop is
    # written and read directly on a held connection. Both write to redis-py's connections
    # directly; false sends every call through redis-py's own client instead.
    autopipeline: bool = True
    # Acknowledge a state change only once this many replicas confirm it (Redis WAIT), so a
    # failover cannot lose it; 0 acknowledges as soon as the master ran it.
    redis_wait_replicas: int = Field(default=0, ge=0)
    redis_wait_timeout_ms: int = Field(default=1000, gt=0, le=5000)
    reaper_interval_s: float = Field(default=1.0, gt=0)
    # A queued task's candidates are counted over at most this many pooled devices of its driver
    # (coordinator/state/wait_reasons.py), so the count costs a bounded read; past it they say
    # "truncated".
    candidates_scanned: int = Field(default=CANDIDATES_SCANNED, gt=0)
    # A feed watcher that has had no event for this long gets a comment, so proxies keep the
    # connection open (coordinator/api/events.py).
    feed_keepalive_s: float = Field(default=15.0, gt=0)
    # Deadlines of the service's own (PROTOCOL.md "Waiting work" and "Retention").
    queue_timeout_s: float = Field(default=86400.0, gt=0)
    claim_timeout_s: float = Field(default=60.0, gt=0)
    task_retention_s: float = Field(default=604800.0, gt=0)
    # Failed credentials (coordinator/api/throttle.py): more than auth_failures_max from one client
    # address within auth_failures_window_s, and its further failures are answered 429 for
    # auth_throttle_s. 0 turns the throttle off. Valid credentials are never counted nor slowed.
    auth_failures_max: int = Field(default=20, ge=0)
    auth_failures_window_s: float = Field(default=60.0, gt=0)
    auth_throttle_s: float = Field(default=60.0, gt=0)
    # Behind a proxy, the client address is the rightmost X-Forwarded-For entry (the one that
    # proxy appended); otherwise the connection's peer. Only a proxy that appends it may be trusted.
    trust_forwarded_for: bool = False
    # Artifacts (PROTOCOL.md, the upload route; docs/operations.md, "Artifacts"). The bytes go to
    # a local folder (relative to the working directory), or to an S3-compatible bucket when
    # artifacts_url is s3://bucket/prefix (artifacts_endpoint: MinIO and the like; credentials
    # from the standard AWS_* variables). Redis holds only their descriptions.
    artifacts_dir: Path = Path("tether-artifacts")
    artifacts_url: str | None = None
    artifacts_endpoint: str | None = None
    max_artifact_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    max_task_artifact_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    # Artifacts per task, whatever their size (each is a description in Redis); at most 5,000 so
    # that retention deletes a task's descriptions in one command.
    max_task_artifacts: int = Field(default=1000, gt=0, le=5000)
    # Uploads this process streams at once; one more is answered 503 unavailable (Retry-After).
    max_concurrent_uploads: int = Field(default=16, gt=0)
    # A blob that no description names is an orphan (its upload died between the two writes)
    # once it is this old; the orphan sweep looks at a page of blobs every interval.
    artifact_orphan_grace_s: float = Field(default=3600.0, gt=0)
    artifact_sweep_interval_s: float = Field(default=60.0, gt=0)
    # Webhook delivery (coordinator/webhooks.py; docs/operations.md, "Webhooks"): each attempt's
    # timeout; how long a delivery a process took stays its own before another process takes it
    # over (more than twice the attempt timeout, or a slow attempt is made twice); attempts at once
    # per process and per endpoint; the retries' backoff (doubling from the base, each delay at
    # most the max, with jitter) and how long after its event a delivery is retried before it is
    # failed; how often an idle process looks for deliveries.
    webhook_attempt_timeout_s: float = Field(default=10.0, gt=0)
    webhook_visibility_s: float = Field(default=60.0, gt=0)
    webhook_concurrency: int = Field(default=32, gt=0)
    webhook_endpoint_concurrency: int = Field(default=4, gt=0)
    webhook_retry_base_s: float = Field(default=1.0, gt=0)
    webhook_retry_max_delay_s: float = Field(default=3600.0, gt=0)
    webhook_retry_for_s: float = Field(default=86400.0, gt=0)
    webhook_poll_interval_s: float = Field(default=0.5, gt=0)
    # An endpoint whose attempts time out this many times in a row has its deliveries held back
    # (no attempt) for the open time, doubling each time it opens again (coordinator/webhooks.py).
    webhook_circuit_timeouts: int = Field(default=3, gt=0)
    webhook_circuit_open_s: float = Field(default=30.0, gt=0)
    # Networks a webhook may reach beyond the public and private ranges (comma-separated CIDRs):
    # loopback, link-local and unspecified addresses are refused unless listed here
    # (coordinator/webhook_targets.py). Tests list 127.0.0.0/8 for their receivers.
    webhook_allow_networks: str = ""
    # Worker processes of `serve` (Heroku's name), and the log format: "text" or "json".
    web_concurrency: int = Field(default=1, ge=1, le=64, validation_alias=AliasChoices("WEB_CONCURRENCY"))
    log_format: Literal["text", "json"] = "text"

    @field_validator("redis_url")
    @classmethod
    def _redis_url_has_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        # redis-py refuses any other URL only when it first connects, with a traceback; and a
        # bare host:port is an easy mistake. The message never repeats the value (a password).
        if value is not None and not value.get_secret_value().startswith(REDIS_URL_SCHEMES):
            raise ValueError("must start with redis://, rediss:// or unix:// "
                             "(for example redis://127.0.0.1:6379/0)")
        return value

    @field_validator("port")
    @classmethod
    def _port_in_range(cls, value: int) -> int:
        if not 0 <= value <= MAX_PORT:
            raise ValueError(f"{value} is not a port (0..{MAX_PORT})")
        return value

    @field_validator("artifacts_url")
    @classmethod
    def _artifacts_url_is_s3(cls, value: str | None) -> str | None:
        if value is not None and value.strip() == "":
            return None
        if value is not None and not value.startswith("s3://"):
            raise ValueError("must look like s3://bucket/prefix (unset: the local folder COORDINATOR_ARTIFACTS_DIR)")
        return value

    @field_validator("webhook_allow_networks")
    @classmethod
    def _networks_are_cidrs(cls, value: str) -> str:
        parse_networks(value)  # its ValueError names the entry that is not a CIDR
        return value

    @field_validator("static_hosts")
    @classmethod
    def _host_ids_valid(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for host_id in value:
            if not wire.is_valid_id(host_id):
                raise ValueError(f"static host id {host_id!r} is not a valid id")
        return value

    @classmethod
    def variable(cls, field: str) -> str:
        """The environment variable that sets ``field``: what an operator must be told to fix.
        (pydantic names a field set through an alias by that alias: it is its own answer.)"""
        if field not in cls.model_fields:
            return field
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, AliasChoices):
            return str(alias.choices[0])
        return (cls.model_config.get("env_prefix") or "") + field.upper()

    @property
    def heartbeat_interval_whole_s(self) -> int:
        """The interval agents are told: the contract's durations are integers, and an agent must
        never be told to heartbeat slower than configured, so fractions round up."""
        return max(1, math.ceil(self.heartbeat_interval_s))

    @property
    def webhook_targets(self) -> TargetPolicy:
        """Where webhooks may post (COORDINATOR_WEBHOOK_ALLOW_NETWORKS)."""
        return TargetPolicy(parse_networks(self.webhook_allow_networks))

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl_s * 1000)

    @property
    def host_offline_after_ms(self) -> int:
        return int(self.host_offline_after_s * 1000)

    @property
    def queue_timeout_ms(self) -> int:
        return int(self.queue_timeout_s * 1000)

    @property
    def claim_timeout_ms(self) -> int:
        return int(self.claim_timeout_s * 1000)

    @property
    def auth_failures_window_ms(self) -> int:
        return max(1, int(self.auth_failures_window_s * 1000))

    @property
    def auth_throttle_ms(self) -> int:
        return max(1, int(self.auth_throttle_s * 1000))

    @property
    def task_retention_ms(self) -> int:
        return int(self.task_retention_s * 1000)
