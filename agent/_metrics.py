"""Prometheus metrics of the agent (prefix ``kubegang_gpu_`` for GPU readings, ``kubegang_agent_``
for the agent itself; base units; ``_total`` on counters; node and GPU index as labels, never a
pod or a job).

NVML's ECC counters are the driver's counts, not the agent's, so they are gauges that mirror the
driver (``kubegang_gpu_ecc_errors``); XIDs are counted by the agent as it sees them, so they are a
counter. A registry per process (not the global one) keeps tests independent.

A series exists only while its reading is known: the series of a GPU that is gone, and of a reading
that became unknown, are removed, because a gauge left at its last value would pass for a current
reading (a GPU that fell off the bus would keep its last, normal temperature).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ._snapshot import GpuReadings, NodeReadings

_ECC = tuple((kind, counter) for kind in ("corrected", "uncorrected") for counter in ("volatile", "aggregate"))


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
        self._xid_seen: dict[tuple[str, str], dict[str, int]] = {}
        """(node, GPU index) → XID → the count already added to its counter."""
        self._series: dict[str, set[str]] = {}
        """Node → the GPU indices it has series for."""

    def observe(self, node: str, readings: NodeReadings, healthy: dict[int, bool]) -> None:
        """Record one node's readings (``healthy``: GPU index → verdict); the series of GPUs no
        longer listed are removed."""
        listed = {str(gpu.index) for gpu in readings.gpus}
        for idx in self._series.get(node, set()) - listed:
            self._forget_gpu(node, idx)
        for gpu in readings.gpus:
            self._observe_gpu(node, gpu, healthy.get(gpu.index, False))
        self.gpus.labels(node).set(len(readings.gpus))
        self.gpus_healthy.labels(node).set(sum(healthy.values()))
        self.unknown.labels(node).set(len(readings.unknown))
        self._series[node] = listed

    def _observe_gpu(self, node: str, gpu: GpuReadings, healthy: bool) -> None:
        idx = str(gpu.index)
        _set(self.memory_used, gpu.memory_used_bytes, node, idx)
        _set(self.memory_total, gpu.memory_total_bytes, node, idx)
        _set(self.temperature, gpu.temperature_celsius, node, idx)
        for kind, counter in _ECC:
            _set(self.ecc, getattr(gpu.ecc, f"{kind}_{counter}"), node, idx, kind, counter)
        self._observe_xids(node, idx, gpu.xid_counts)
        self.healthy.labels(node, idx).set(1 if healthy else 0)

    def _observe_xids(self, node: str, idx: str, counts: Mapping[int, int] | None) -> None:
        """Add what is new in the backend's cumulative counts; unknown counts (events not watched)
        remove the GPU's XID series, and a later known count starts them again from that count."""
        if counts is None:
            self._forget_xids(node, idx)
            return
        seen = self._xid_seen.setdefault((node, idx), {})
        for xid, count in counts.items():
            key = str(xid)
            delta = count - seen.get(key, 0)
            if delta > 0:
                self.xid.labels(node, idx, key).inc(delta)
                seen[key] = count

    def _forget_gpu(self, node: str, idx: str) -> None:
        for gauge in (self.memory_used, self.memory_total, self.temperature, self.healthy):
            _remove(gauge, node, idx)
        for kind, counter in _ECC:
            _remove(self.ecc, node, idx, kind, counter)
        self._forget_xids(node, idx)

    def _forget_xids(self, node: str, idx: str) -> None:
        for xid in self._xid_seen.pop((node, idx), {}):
            _remove(self.xid, node, idx, xid)

    def forget(self, node: str) -> None:
        """Drop a node's series (a fake node that went away)."""
        for idx in self._series.pop(node, set()):
            self._forget_gpu(node, idx)
        for gauge in (self.gpus, self.gpus_healthy, self.unknown):
            _remove(gauge, node)


def _set(gauge: Gauge, value: int | None, *labels: str) -> None:
    """Set a reading's series, or remove it when the reading is unknown (None)."""
    if value is None:
        _remove(gauge, *labels)
    else:
        gauge.labels(*labels).set(value)


def _remove(metric: Gauge | Counter, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
