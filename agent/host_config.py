"""What the host agent's loops are configured with (`HostConfig`): one object, built from the
agent's settings at start (`HostConfig.from_settings`) or by a test, instead of a keyword per
setting on the agent."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.artifacts import DRAIN_S, ArtifactMode
from agent.retry import RetryPolicy
from agent.settings import AgentSettings


@dataclass(frozen=True)
class HostConfig:
    """The host agent's configuration.

    - ``hostname``, ``version``: reported with every heartbeat; so is ``instance_id``, this
      agent process's own, by which the coordinator tells two agents started as one host apart.
    - ``labels``: put on every device of the snapshot.
    - ``poll_wait_s``: how long each claim long-poll may wait at the coordinator.
    - ``heartbeat_interval_s``: applies until the coordinator answers with its own.
    - ``device_refresh_s``: how often device state is re-read.
    - ``shutdown_grace_s``: how long running work may take to finish after shutdown is asked.
    - ``renew_fraction``: a lease is renewed when this fraction of its TTL is left.
    - ``retry_policy``: governs every retry of every loop and run (its ``rng`` also jitters the
      pause after an empty poll).
    - ``min_poll_interval_s``: an empty claim answer that came sooner than this is followed by a
      pause, so a coordinator answering at once does not make the agent spin.
    - ``managed``: an enrolled host, whose devices are enrolled again when the coordinator no
      longer knows one (a legacy host never enrolls).
    - ``artifacts``: which evidence of each run is uploaded (``agent/artifacts.py``); off unless
      configured, so a test's coordinator double need not take uploads. ``artifact_drain_s``:
      how long a run that has ended waits for its pending uploads before it reports.
    """

    hostname: str
    version: str
    labels: Mapping[str, str] = field(default_factory=dict)
    poll_wait_s: int = 25
    heartbeat_interval_s: float = 15.0
    device_refresh_s: float = 5.0
    shutdown_grace_s: float = 30.0
    renew_fraction: float = 1 / 3
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    min_poll_interval_s: float = 1.0
    managed: bool = False
    artifacts: ArtifactMode = ArtifactMode.OFF
    artifact_drain_s: float = DRAIN_S
    instance_id: str = field(default_factory=lambda: "ai_" + uuid.uuid4().hex)

    @classmethod
    def from_settings(cls, settings: AgentSettings, *, version: str, retry_policy: RetryPolicy,
                      managed: bool) -> HostConfig:
        """The configuration ``python -m agent`` runs with: the settings' values, and what start-up
        found (the identity's kind, the version)."""
        return cls(
            hostname=settings.hostname,
            version=version,
            labels=dict(settings.labels),
            poll_wait_s=settings.poll_wait_s,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            device_refresh_s=settings.device_refresh_s,
            shutdown_grace_s=settings.shutdown_grace_s,
            retry_policy=retry_policy,
            managed=managed,
            artifacts=ArtifactMode(settings.artifacts),
        )
