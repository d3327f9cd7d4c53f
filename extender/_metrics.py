"""Prometheus metrics of the extender, on a registry the process owns.

Why an owned registry instead of the global one: tests start several servers in one process, and
the benchmark wants clean counters; each :class:`ExtenderMetrics` is independent and the health
listener exposes exactly the registry it was given. Names follow DESIGN.md (``kubegang_`` prefix,
base units, ``_total`` counters, no pod or job names as labels).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Extender verbs must answer in milliseconds; the buckets resolve 100 µs .. 1 s.
_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)


class ExtenderMetrics:
    """All extender metrics; ``registry`` is what ``/metrics`` serves."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.request_duration = Histogram(
            "kubegang_extender_request_duration_seconds",
            "Server-side time to answer one request, per verb (HTTP verbs and gRPC methods).",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "kubegang_extender_requests_total",
            "Requests answered, per verb and result code (HTTP status or gRPC status name).",
            ["verb", "code"],
            registry=self.registry,
        )
        self.errors = Counter(
            "kubegang_extender_errors_total",
            "Requests that failed, per verb and kind (bad_request, too_large, internal, ...).",
            ["verb", "kind"],
            registry=self.registry,
        )
        self.gpus = Gauge(
            "kubegang_extender_gpus",
            "GPUs in the ledger per state (bound, reserved, free) and GPU product.",
            ["state", "product"],
            registry=self.registry,
        )
        self.reservations = Gauge(
            "kubegang_extender_reservations",
            "Gang reservations held in memory and not yet turned into pods.",
            registry=self.registry,
        )
        self.intrusions = Counter(
            "kubegang_extender_intrusions_total",
            "Gang slots whose planned GPUs a pod kubegang did not place took (another scheduler, a manual "
            "nodeName, a namespace opted out of routing); each is re-placed by the operator (Repair).",
            registry=self.registry,
        )
        self.watch_restarts = Counter(
            "kubegang_extender_watch_restarts_total",
            "Watch streams restarted, per resource and reason (gone, error, closed).",
            ["resource", "reason"],
            registry=self.registry,
        )
        self.tls_reloads = Counter(
            "kubegang_extender_tls_reloads_total",
            "Changes of the mounted certificate files, per outcome: reloaded (new connections get the new "
            "certificate) or refused (they do not load; the last good certificate stays).",
            ["outcome"],
            registry=self.registry,
        )
