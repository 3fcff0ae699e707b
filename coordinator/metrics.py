"""Prometheus metrics, in a registry of the process's own (no globals).

Two kinds. Per-process ones are counted where they happen (requests, claims, renewals, results,
artifact uploads, the schedule-to-start and blob-store histograms, waiting polls, feed watchers);
with several worker processes each scrape sees the process that answered it. Deployment-wide ones
are read from Redis at scrape time (tasks by status, queue depth by waiting reason, expiries,
timeouts, retries, deletions, artifact bytes stored, each team's devices held and tasks queued, runs
by status), so
every process answers the same figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import wire
from coordinator.state.reads import Queries
from coordinator.state.records import TeamShare
from coordinator.state.wait_reasons import waiting_reason
from coordinator.state.webhooks import WebhookStore


@dataclass
class Deployment:
    """The deployment-wide figures of one scrape, read from Redis."""

    tasks_by_status: dict[str, int] = field(default_factory=dict)
    queued_by_reason: dict[str, int] = field(default_factory=dict)
    queued_examined: int = 0
    counters: dict[str, int] = field(default_factory=dict)  # the stats hash
    teams: list[TeamShare] = field(default_factory=list)
    webhook_outbox: int = 0  # deliveries in the outbox: not attempted yet, or held by a process
    webhook_retries: int = 0  # deliveries waiting for a retry


# The stats hash's fields (written by the scripts) and what each counts.
STAT_COUNTERS = {
    "lease_expiries": "Leases that expired",
    "claim_timeouts": "Assignments sent back to the queue because their host did not claim in time",
    "queue_timeouts": "Tasks failed with queue_timeout",
    "retries": "Retryable failures requeued as a new attempt",
    "purged": "Terminal tasks deleted after their retention",
}


class _DeploymentCollector(Collector):
    def __init__(self) -> None:
        self.latest = Deployment()

    def collect(self) -> Iterator[Metric]:
        d = self.latest
        by_status = GaugeMetricFamily("tether_tasks", "Tasks by status (deployment-wide)", labels=["status"])
        for status, n in sorted(d.tasks_by_status.items()):
            by_status.add_metric([status], n)
        yield by_status
        by_reason = GaugeMetricFamily(
            "tether_queued_tasks_by_reason",
            "Queued tasks by waiting reason, among the oldest examined (tether_queued_tasks_examined)",
            labels=["reason"],
        )
        for reason, n in sorted(d.queued_by_reason.items()):
            by_reason.add_metric([reason], n)
        yield by_reason
        yield GaugeMetricFamily("tether_queued_tasks_examined", "Queued tasks whose reason was computed",
                                value=d.queued_examined)
        for name, help_text in STAT_COUNTERS.items():
            yield CounterMetricFamily(f"tether_{name}", f"{help_text} (deployment-wide)",
                                      value=d.counters.get(name, 0))
        running = GaugeMetricFamily("tether_team_running", "Devices each team's tasks hold (deployment-wide)",
                                    labels=["team"])
        queued = GaugeMetricFamily("tether_team_queued", "Each team's queued tasks (deployment-wide)",
                                   labels=["team"])
        for share in d.teams:
            running.add_metric([share.team], share.running)
            queued.add_metric([share.team], share.queued)
        yield running
        yield queued
        runs = GaugeMetricFamily("tether_runs", "Runs by status, kept by the scripts (deployment-wide)",
                                 labels=["status"])
        for status in wire.values(wire.RunStatus):
            runs.add_metric([status], d.counters.get(f"runs_{status}", 0))
        yield runs
        yield GaugeMetricFamily("tether_webhook_outbox",
                                "Webhook deliveries in the outbox, not attempted yet (deployment-wide)",
                                value=d.webhook_outbox)
        yield GaugeMetricFamily("tether_webhook_retries",
                                "Webhook deliveries waiting for their next attempt (deployment-wide)",
                                value=d.webhook_retries)
        yield GaugeMetricFamily("tether_artifact_bytes",
                                "Bytes of artifacts in the blob store that descriptions name (deployment-wide)",
                                value=d.counters.get("artifact_bytes", 0))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("tether_http_requests", "HTTP requests by route and status",
                                ["route", "method", "status"], registry=self.registry)
        self.claims = Counter("tether_claims", "Claim polls by outcome (assigned, empty, disconnected)",
                              ["outcome"], registry=self.registry)
        self.renewals = Counter("tether_renewals", "Lease renewals by outcome (ok or the conflict code)",
                                ["outcome"], registry=self.registry)
        self.results = Counter("tether_results", "Results by outcome (recorded, replayed or the conflict code)",
                               ["outcome"], registry=self.registry)
        self.schedule_to_start = Histogram(
            "tether_schedule_to_start_seconds",
            "From a task's attempt entering the queue (its creation, for the first) to its claim",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
            registry=self.registry,
        )
        self.artifact_uploads = Counter(
            "tether_artifact_uploads", "Artifact uploads by outcome (stored, replayed or the error code)",
            ["outcome"], registry=self.registry)
        self.artifact_store_seconds = Histogram(
            "tether_artifact_store_seconds", "Blob store calls by operation (put, commit, head, get, delete, list)",
            ["operation"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.waiting_polls = Gauge(
            "tether_waiting_polls", "Long-polls waiting in this process", registry=self.registry
        )
        self.feed_watchers = Gauge(
            "tether_feed_watchers", "Watchers of the live event feed in this process", registry=self.registry
        )
        self.webhook_attempts = Counter(
            "tether_webhook_attempts", "Webhook delivery attempts this process made, by outcome (delivered, failed)",
            ["outcome"], registry=self.registry)
        self.webhook_latency = Histogram(
            "tether_webhook_delivery_seconds", "From an event to its webhook delivery's 2xx, retries included",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400),
            registry=self.registry,
        )
        self._deployment = _DeploymentCollector()
        self.registry.register(self._deployment)

    def render(self, deployment: Deployment | None = None) -> bytes:
        if deployment is not None:
            self._deployment.latest = deployment
        return generate_latest(self.registry)


# How many of the oldest queued tasks a scrape computes waiting reasons for (tasks with the same
# target share one computation; see coordinator/state/wait_reasons.py for its bound).
QUEUED_EXAMINED = 500


async def read_deployment(queries: Queries, webhooks: WebhookStore | None = None) -> Deployment:
    """The deployment-wide figures a scrape reports, read from Redis now."""
    queued = await queries.oldest_queued(QUEUED_EXAMINED)
    outbox, retries = await webhooks.backlog() if webhooks is not None else (0, 0)
    candidates = await queries.candidates(queued)
    by_reason: dict[str, int] = dict.fromkeys(wire.values(wire.WaitingReason), 0)
    for counts in candidates.values():
        by_reason[waiting_reason(counts)] += 1
    return Deployment(
        tasks_by_status=await queries.task_counts(),
        queued_by_reason=by_reason,
        queued_examined=len(queued),
        counters=await queries.stats(),
        teams=await queries.teams(),
        webhook_outbox=outbox,
        webhook_retries=retries,
    )
