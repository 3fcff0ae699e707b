"""Prometheus metrics of one coordinator process, in a registry of its own (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class _LabelledCounter:
    """A counter whose label children are looked up once each: ``labels()`` locks and builds a
    key on every call, which showed up on the hot path under load."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._children: dict[tuple[str, ...], Counter] = {}

    def inc(self, *labels: str) -> None:
        child = self._children.get(labels)
        if child is None:
            child = self._children.setdefault(labels, self._counter.labels(*labels))
        child.inc()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = _LabelledCounter(Counter(
            "tether_http_requests", "HTTP requests by route and status", ["route", "method", "status"],
            registry=self.registry,
        ))
        self.claims = _LabelledCounter(Counter(
            "tether_claims", "Claim polls by outcome (assigned, empty, disconnected)", ["outcome"],
            registry=self.registry,
        ))
        self.renewals = _LabelledCounter(Counter(
            "tether_renewals", "Lease renewals by outcome (ok or the conflict code)", ["outcome"],
            registry=self.registry,
        ))
        self.results = _LabelledCounter(Counter(
            "tether_results", "Results by outcome (recorded, replayed or the conflict code)", ["outcome"],
            registry=self.registry,
        ))
        self.lease_expiries = Counter(
            "tether_lease_expiries", "Leases ended by the reaper in this process", registry=self.registry
        )
        self.waiting_polls = Gauge(
            "tether_waiting_polls", "Long-polls waiting in this process", registry=self.registry
        )

        self.feed_watchers = Gauge(
            "tether_feed_watchers", "Watchers of the live event feed in this process", registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
