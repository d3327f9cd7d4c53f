"""The publisher writes only on change, resyncs on a timer, recreates a deleted GPUNode and
survives API errors. The sink is a recorder (the unit under test is the publisher's own logic)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubegang.agent._dump import Dump
from kubegang.agent._kube import GPUNodeMissing
from kubegang.agent._metrics import AgentMetrics
from kubegang.agent._publisher import NodePublisher, PollResult
from kubegang.agent._settings import AgentSettings
from kubegang.api import Condition

Load = Callable[[str], dict[str, Any]]


class RecordingSink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.fail_next: list[str] = []

    def _maybe_fail(self, kind: str) -> None:
        if kind in self.fail_next:
            self.fail_next.remove(kind)
            raise RuntimeError(f"API server said no ({kind})")

    async def create_gpunode(self, name: str) -> Sequence[Condition]:
        """As the API server would: an existing GPUNode keeps its status, and its conditions are
        what a publisher that starts must carry on from."""
        self.calls.append(("create", name))
        status = self.objects.setdefault(name, {}).get("status") or {}
        return [Condition.model_validate(c) for c in status.get("conditions") or ()]

    async def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.calls.append(("status", name))
        self._maybe_fail("status")
        if name not in self.objects:
            raise GPUNodeMissing(name)
        self.objects[name]["status"] = dict(status)

    async def patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        self.calls.append(("labels", name))
        self._maybe_fail("labels")
        current = self.labels.setdefault(name, {})
        for key, value in labels.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value


class MutableBackend:
    def __init__(self, dump: Dump) -> None:
        self.dump = dump

    def read(self) -> Dump:
        return copy.deepcopy(self.dump)

    def version(self) -> int | None:
        return None

    def close(self) -> None:
        pass


class VersionedBackend(MutableBackend):
    """Says when its data changed, as the replay backend does by the dump file's mtime."""

    def __init__(self, dump: Dump) -> None:
        super().__init__(dump)
        self.token = 1
        self.reads = 0

    def read(self) -> Dump:
        self.reads += 1
        return super().read()

    def version(self) -> int | None:
        return self.token


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.t)

    def mono(self) -> float:
        return self.t


def publisher(dump: Dump, sink: RecordingSink, clock: Clock) -> tuple[NodePublisher, MutableBackend]:
    settings = AgentSettings(node_name="n1", poll_interval_s=10, resync_interval_s=300, metrics_port=0)
    backend = MutableBackend(dump)
    pub = NodePublisher("n1", backend, sink, settings, AgentMetrics(), clock=clock.wall, monotonic=clock.mono)
    return pub, backend


async def test_writes_once_then_only_on_change(load_dump_fixture: Load) -> None:
    sink, clock = RecordingSink(), Clock()
    pub, backend = publisher(load_dump_fixture("gb200-nvl72-tray"), sink, clock)

    first = await pub.poll_once()
    assert (first.status_written, first.labels_written) == (True, True)
    assert sink.calls == [("create", "n1"), ("status", "n1"), ("labels", "n1")]
    assert sink.labels["n1"]["kubegang.io/nvlink-domain"] == "7a1c3e52-9f4b-4c1d-8e2a-5b6f0d3c9a81.32766"

    for _ in range(5):  # time passes, temperature changes: nothing the GPUNode shows
        clock.t += 10
        backend.dump["devices"][0]["Temperature"] += 1
        result = await pub.poll_once()
        assert (result.status_written, result.labels_written) == (False, False)
    assert len(sink.calls) == 3

    clock.t += 10
    backend.dump["devices"][2]["XidEvents"] = {"79": 1}
    result = await pub.poll_once()
    assert (result.status_written, result.labels_written) == (True, False)
    status = sink.objects["n1"]["status"]
    assert status["gpus"][2]["health"]["healthy"] is False
    assert status["healthyGpus"] == 3
    healthy = next(c for c in status["conditions"] if c["type"] == "GPUHealthy")
    assert healthy["status"] == "False" and healthy["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged condition keeps its time


async def test_a_publisher_that_starts_keeps_the_transition_times_the_gpunode_shows(load_dump_fixture: Load) -> None:
    """An agent restart: the new publisher has no memory, but a condition whose status did not
    change keeps the lastTransitionTime already published; one that changed gets the new time."""
    sink, clock = RecordingSink(), Clock()
    first, _backend = publisher(load_dump_fixture("gb200-nvl72-tray"), sink, clock)
    await first.poll_once()
    before = {c["type"]: c for c in sink.objects["n1"]["status"]["conditions"]}
    assert before["GPUHealthy"]["status"] == "True"

    clock.t += 3600  # the agent restarts an hour later; meanwhile GPU 2 had a fatal XID
    dump = load_dump_fixture("gb200-nvl72-tray")
    dump["devices"][2]["XidEvents"] = {"79": 1}
    restarted, _backend = publisher(dump, sink, clock)
    assert (await restarted.poll_once()).status_written
    after = {c["type"]: c for c in sink.objects["n1"]["status"]["conditions"]}
    for type_ in ("Ready", "NVLinkFabric"):
        assert after[type_]["status"] == before[type_]["status"]
        assert after[type_]["lastTransitionTime"] == before[type_]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert after["GPUHealthy"]["status"] == "False"
    assert after["GPUHealthy"]["lastTransitionTime"] == "2026-01-01T01:00:00Z"

    clock.t += 10  # and the publisher goes on from what it wrote
    assert not (await restarted.poll_once()).status_written
    backend = restarted.backend
    assert isinstance(backend, MutableBackend)
    backend.dump["devices"][2]["XidEvents"] = {}
    clock.t += 10
    assert (await restarted.poll_once()).status_written
    final = {c["type"]: c for c in sink.objects["n1"]["status"]["conditions"]}
    assert final["GPUHealthy"]["lastTransitionTime"] == "2026-01-01T01:00:20Z"
    assert final["Ready"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


async def test_losing_the_domain_removes_the_labels_and_nulls_the_status(load_dump_fixture: Load) -> None:
    sink, clock = RecordingSink(), Clock()
    dump = load_dump_fixture("gb200-nvl72-tray")
    pub, backend = publisher(dump, sink, clock)
    await pub.poll_once()
    assert "nvidia.com/gpu.clique" in sink.labels["n1"]

    backend.dump = load_dump_fixture("gb200-degraded-fabric")
    clock.t += 10
    result = await pub.poll_once()
    assert (result.status_written, result.labels_written) == (True, True)
    assert "nvidia.com/gpu.clique" not in sink.labels["n1"]
    assert "kubegang.io/nvlink-domain" not in sink.labels["n1"]
    assert sink.objects["n1"]["status"]["nvlinkDomain"] is None  # explicit null: merge patch removes it


async def test_resync_writes_even_without_change(load_dump_fixture: Load) -> None:
    sink, clock = RecordingSink(), Clock()
    pub, _backend = publisher(load_dump_fixture("h200-sxm-1gpu"), sink, clock)
    await pub.poll_once()
    clock.t += 290
    assert not (await pub.poll_once()).status_written
    clock.t += 10
    result = await pub.poll_once()
    assert (result.status_written, result.labels_written) == (True, True)
    assert sink.objects["n1"]["status"]["lastSeen"] == "2026-01-01T00:05:00Z"


async def test_failed_writes_are_retried_next_poll(load_dump_fixture: Load) -> None:
    sink, clock = RecordingSink(), Clock()
    sink.fail_next = ["status", "labels"]
    pub, _backend = publisher(load_dump_fixture("hgx-h100-8gpu"), sink, clock)
    first = await pub.poll_once()
    assert (first.status_written, first.labels_written) == (False, False) and len(first.errors) == 2
    clock.t += 10
    second = await pub.poll_once()
    assert (second.status_written, second.labels_written) == (True, True) and not second.errors
    assert sink.labels["n1"]["nvidia.com/gpu.count"] == "8"


async def test_a_deleted_gpunode_is_recreated(load_dump_fixture: Load) -> None:
    sink, clock = RecordingSink(), Clock()
    pub, _backend = publisher(load_dump_fixture("h200-sxm-1gpu"), sink, clock)
    await pub.poll_once()
    del sink.objects["n1"]
    clock.t += 300
    result = await pub.poll_once()
    assert result.status_written and "status" in sink.objects["n1"]
    assert sink.calls.count(("create", "n1")) == 2


async def test_metrics_follow_the_readings(load_dump_fixture: Load, tmp_path: Path) -> None:
    sink, clock = RecordingSink(), Clock()
    dump = load_dump_fixture("gb200-degraded-fabric")
    pub, _backend = publisher(dump, sink, clock)
    await pub.poll_once()
    metrics = pub._metrics
    sample = metrics.registry.get_sample_value
    assert sample("kubegang_gpu_xid_events_total", {"node": "n1", "gpu": "1", "xid": "74"}) == 1
    assert sample("kubegang_gpu_healthy", {"node": "n1", "gpu": "1"}) == 0
    assert sample("kubegang_agent_gpus_healthy", {"node": "n1"}) == 2
    assert sample("kubegang_gpu_temperature_celsius", {"node": "n1", "gpu": "3"}) == 31
    assert sample("kubegang_agent_poll_duration_seconds_count", {}) == 1
    # The same cumulative XID count seen again is not counted twice.
    await pub.poll_once()
    assert sample("kubegang_gpu_xid_events_total", {"node": "n1", "gpu": "1", "xid": "74"}) == 1
    metrics.forget("n1")
    assert sample("kubegang_gpu_healthy", {"node": "n1", "gpu": "1"}) is None


async def test_a_backend_whose_version_stands_still_is_not_read_until_a_write_is_due(load_dump_fixture: Load) -> None:
    sink, clock = RecordingSink(), Clock()
    settings = AgentSettings(node_name="n1", poll_interval_s=10, resync_interval_s=300, metrics_port=0)
    backend = VersionedBackend(load_dump_fixture("gb200-nvl72-tray"))
    pub = NodePublisher("n1", backend, sink, settings, AgentMetrics(), clock=clock.wall, monotonic=clock.mono)
    await pub.poll_once()
    assert backend.reads == 1 and len(sink.calls) == 3

    for _ in range(5):
        clock.t += 10
        assert await pub.poll_once() == PollResult(False, False)
    assert backend.reads == 1 and pub.last_poll == clock.t
    # The poll histogram counts reads (docs/metrics.md): five polls that read nothing are no sample.
    assert pub._metrics.registry.get_sample_value("kubegang_agent_poll_duration_seconds_count", {}) == 1

    clock.t += 10  # the data changed: read, and write what the GPUNode shows
    backend.dump["devices"][2]["XidEvents"] = {"79": 1}
    backend.token = 2
    assert (await pub.poll_once()).status_written
    assert backend.reads == 2

    clock.t += 10  # a failed write is retried even though the data did not change
    backend.dump["devices"][2]["XidEvents"] = {}
    backend.token = 3
    sink.fail_next.append("status")
    assert (await pub.poll_once()).errors
    clock.t += 10
    assert (await pub.poll_once()).status_written
    assert backend.reads == 4

    pub.forget_written()  # the GPUNode was deleted: read and write again
    clock.t += 10
    assert (await pub.poll_once()).status_written
    assert backend.reads == 5

    clock.t += 300  # resync is due: read (for a fresh lastSeen) and write
    result = await pub.poll_once()
    assert (result.status_written, result.labels_written) == (True, True)
    assert backend.reads == 6


async def test_a_node_whose_driver_loads_late_keeps_its_labels_until_the_gpus_are_read(load_dump_fixture: Load) -> None:
    """While NVML cannot be used the agent writes the GPUNode (Ready=False) but no label: the
    node keeps ``gpu.present=true``, so the agent DaemonSet keeps its pod there, and the labels
    follow once the driver has loaded."""
    sink, clock = RecordingSink(), Clock()
    sink.labels["n1"] = {"nvidia.com/gpu.present": "true"}
    no_driver = {"init": {"code": 9, "error": "NVMLError_DriverNotLoaded", "msg": "Driver Not Loaded"}, "devices": []}
    pub, backend = publisher(no_driver, sink, clock)

    first = await pub.poll_once()
    assert (first.status_written, first.labels_written) == (True, False)
    clock.t += 400  # past the resync interval: still nothing to write
    await pub.poll_once()
    assert ("labels", "n1") not in sink.calls
    assert sink.labels["n1"] == {"nvidia.com/gpu.present": "true"}

    backend.dump = load_dump_fixture("gb200-nvl72-tray")
    clock.t += 10
    result = await pub.poll_once()
    assert result.labels_written
    assert sink.labels["n1"]["nvidia.com/gpu.present"] == "true"
    assert sink.labels["n1"]["nvidia.com/gpu.count"] == "4"
