"""Prometheus metrics of the agent (prefix ``kubegang_gpu_`` for GPU readings, ``kubegang_agent_``
for the agent itself; base units; ``_total`` on counters; node and GPU index as labels, never a
pod or a job).

NVML's ECC counters are the driver's counts, not the agent's, so they are gauges that mirror the
driver (``kubegang_gpu_ecc_errors``); XIDs are counted by the agent as it sees them, so they are a
counter. A registry per process (not the global one) keeps tests independent.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ._snapshot import NodeReadings


class AgentMetrics:
    """The agent's metrics in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        gpu = ["node", "gpu"]
        self.memory_used = Gauge("kubegang_gpu_memory_used_bytes", "GPU memory in use", gpu, registry=r)
        self.memory_total = Gauge("kubegang_gpu_memory_total_bytes", "GPU memory", gpu, registry=r)
        self.temperature = Gauge("kubegang_gpu_temperature_celsius", "GPU core temperature", gpu, registry=r)
        self.ecc = Gauge(
            "kubegang_gpu_ecc_errors",
            "ECC errors as the driver counts them (volatile: since driver load; aggregate: lifetime)",
            [*gpu, "type", "counter"],
            registry=r,
        )
        self.xid = Counter("kubegang_gpu_xid_events", "XID events seen", [*gpu, "xid"], registry=r)
        self.healthy = Gauge("kubegang_gpu_healthy", "1 if the GPU is fit for new work", gpu, registry=r)
        self.gpus = Gauge("kubegang_agent_gpus", "GPUs on the node", ["node"], registry=r)
        self.gpus_healthy = Gauge("kubegang_agent_gpus_healthy", "Healthy GPUs on the node", ["node"], registry=r)
        self.unknown = Gauge(
            "kubegang_agent_unknown_readings", "Readings the agent could not make", ["node"], registry=r
        )
        self.poll = Histogram(
            "kubegang_agent_poll_duration_seconds",
            "Time to read one node (NVML or replay) and build its status",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.writes = Counter("kubegang_agent_api_writes", "Writes to the API server", ["kind"], registry=r)
        self.write_errors = Counter(
            "kubegang_agent_api_write_errors", "Failed writes to the API server", ["kind"], registry=r
        )
        self._xid_seen: dict[tuple[str, str, str], int] = {}
        self._series: dict[str, set[str]] = {}

    def observe(self, node: str, readings: NodeReadings, healthy: dict[int, bool]) -> None:
        """Record one node's readings (``healthy``: GPU index → verdict)."""
        indices: set[str] = set()
        for gpu in readings.gpus:
            idx = str(gpu.index)
            indices.add(idx)
            if gpu.memory_used_bytes is not None:
                self.memory_used.labels(node, idx).set(gpu.memory_used_bytes)
            if gpu.memory_total_bytes is not None:
                self.memory_total.labels(node, idx).set(gpu.memory_total_bytes)
            if gpu.temperature_celsius is not None:
                self.temperature.labels(node, idx).set(gpu.temperature_celsius)
            for kind in ("corrected", "uncorrected"):
                for counter in ("volatile", "aggregate"):
                    value = getattr(gpu.ecc, f"{kind}_{counter}")
                    if value is not None:
                        self.ecc.labels(node, idx, kind, counter).set(value)
            for xid, count in gpu.xid_counts.items():
                key = (node, idx, str(xid))
                delta = count - self._xid_seen.get(key, 0)
                if delta > 0:
                    self.xid.labels(*key).inc(delta)
                self._xid_seen[key] = max(count, self._xid_seen.get(key, 0))
            self.healthy.labels(node, idx).set(1 if healthy.get(gpu.index) else 0)
        self.gpus.labels(node).set(len(readings.gpus))
        self.gpus_healthy.labels(node).set(sum(healthy.values()))
        self.unknown.labels(node).set(len(readings.unknown))
        self._series[node] = indices

    def forget(self, node: str) -> None:
        """Drop a node's series (a fake node that went away)."""
        for idx in self._series.pop(node, set()):
            for gauge in (self.memory_used, self.memory_total, self.temperature, self.healthy):
                _remove(gauge, node, idx)
            for kind in ("corrected", "uncorrected"):
                for counter in ("volatile", "aggregate"):
                    _remove(self.ecc, node, idx, kind, counter)
        for key in [k for k in self._xid_seen if k[0] == node]:
            _remove(self.xid, *key)
            del self._xid_seen[key]
        for gauge in (self.gpus, self.gpus_healthy, self.unknown):
            _remove(gauge, node)


def _remove(metric: Gauge | Counter, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
