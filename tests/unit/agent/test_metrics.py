"""Metric series follow the readings (docs/agent.md, Metrics): a series whose GPU is gone, or whose
reading became unknown, is removed rather than left showing its last value as if it were current."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubegang.agent import parse_dump
from kubegang.agent._metrics import AgentMetrics

Load = Callable[[str], dict[str, Any]]
NOT_SUPPORTED = {"code": 3, "error": "NVMLError_NotSupported", "msg": "Not Supported"}


def observe(metrics: AgentMetrics, dump: dict[str, Any]) -> None:
    readings = parse_dump(dump)
    metrics.observe("n1", readings, {g.index: True for g in readings.gpus})


def gpu_series(metrics: AgentMetrics, gpu: str) -> set[str]:
    """Names of the samples that carry ``gpu`` as their gpu label on node n1."""
    return {
        sample.name
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.labels.get("node") == "n1" and sample.labels.get("gpu") == gpu
    }


def test_series_of_a_gone_gpu_and_of_readings_that_became_unknown_are_removed(load_dump_fixture: Load) -> None:
    metrics = AgentMetrics()
    sample = metrics.registry.get_sample_value
    dump = load_dump_fixture("gb200-degraded-fabric")  # gpu 1 has XIDs 13 and 74
    observe(metrics, dump)
    assert sample("kubegang_gpu_temperature_celsius", {"node": "n1", "gpu": "3"}) == 31
    assert sample("kubegang_gpu_temperature_celsius", {"node": "n1", "gpu": "0"}) is not None
    assert sample("kubegang_gpu_xid_events_total", {"node": "n1", "gpu": "1", "xid": "74"}) == 1
    assert "kubegang_gpu_memory_used_bytes" in gpu_series(metrics, "2")

    del dump["devices"][3]  # gpu 3 is gone
    dump["devices"][0]["Temperature"] = NOT_SUPPORTED  # its temperature can no longer be read
    dump["devices"][1]["XidEvents"] = {"error": "XidWatchUnavailable", "msg": "XID event watch stopped"}
    dump["devices"][2]["MemoryInfo"] = NOT_SUPPORTED
    dump["devices"][2]["EccErrors"]["uncorrected"]["volatile"] = NOT_SUPPORTED
    observe(metrics, dump)

    assert gpu_series(metrics, "3") == set()
    assert sample("kubegang_gpu_temperature_celsius", {"node": "n1", "gpu": "0"}) is None
    assert sample("kubegang_gpu_xid_events_total", {"node": "n1", "gpu": "1", "xid": "74"}) is None
    assert sample("kubegang_gpu_xid_events_total", {"node": "n1", "gpu": "1", "xid": "13"}) is None
    assert not {"kubegang_gpu_memory_used_bytes", "kubegang_gpu_memory_total_bytes"} & gpu_series(metrics, "2")
    ecc = {"node": "n1", "gpu": "2", "type": "uncorrected"}
    assert sample("kubegang_gpu_ecc_errors", {**ecc, "counter": "volatile"}) is None
    assert sample("kubegang_gpu_ecc_errors", {**ecc, "counter": "aggregate"}) is not None
    # What is still known stays, and the unknown readings are counted.
    assert sample("kubegang_gpu_temperature_celsius", {"node": "n1", "gpu": "1"}) is not None
    assert sample("kubegang_gpu_healthy", {"node": "n1", "gpu": "0"}) == 1
    assert sample("kubegang_agent_gpus", {"node": "n1"}) == 3
    assert sample("kubegang_agent_unknown_readings", {"node": "n1"}) == 3 * 2 + 4  # + retired pages, refused

    # A reading that comes back is published again; an XID counter starts again from the count.
    observe(metrics, load_dump_fixture("gb200-degraded-fabric"))
    assert sample("kubegang_gpu_temperature_celsius", {"node": "n1", "gpu": "3"}) == 31
    assert sample("kubegang_gpu_xid_events_total", {"node": "n1", "gpu": "1", "xid": "74"}) == 1

    metrics.forget("n1")
    assert all(gpu_series(metrics, str(i)) == set() for i in range(4))
