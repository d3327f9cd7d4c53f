"""The real backend against a fake pynvml module that serves a dump: what it writes parses to the
same GPUNode, any call can fail without costing more than its reading, and only XID events count."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from kubegang.agent import NvmlBackend, build_status, parse_dump
from kubegang.agent._metrics import AgentMetrics

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Load = Callable[[str], dict[str, Any]]


def nvml_error(entry: dict[str, Any]) -> Exception:
    return pynvml.NVMLError(entry["code"]) if "code" in entry else TypeError(entry.get("msg", ""))


def _fill_fabric(struct: Any, info: dict[str, Any]) -> int:
    """Write a dump's fabric info into whichever fabric struct the backend passed (NVML's way)."""
    for name, *_ in struct._fields_:
        if name == "clusterUuid":
            struct.clusterUuid[:] = info["clusterUuid"]
        elif name in info:
            setattr(struct, name, info[name])
    return 0


class FakeNvml:
    """Enough of pynvml for NvmlBackend, answering from a dump (errors raised as NVMLError)."""

    NVML_NVLINK_MAX_LINKS = 36
    NVML_AFFINITY_SCOPE_NODE = 0
    NVML_TEMPERATURE_GPU = 0
    c_nvmlGpuFabricInfo_v3_t = pynvml.c_nvmlGpuFabricInfo_v3_t
    c_nvmlGpuFabricInfo_v2_t = pynvml.c_nvmlGpuFabricInfo_v2_t

    def __init__(self, dump: dict[str, Any], fail: dict[str, dict[str, Any]] | None = None) -> None:
        self.dump = dump
        self.fail = fail or {}
        self.events: list[Any] = []
        self.shutdown = False
        self.refuse_events: dict[int, dict[str, Any]] = {}
        """GPU index → the error its XID event registration answers."""
        self.lost: set[int] = set()
        """GPUs that answer GPU-is-lost to every call on their handle (the handle still opens)."""
        for name in dump["devices"][0]["gpuInstanceProfiles"]:
            setattr(self, name, name)

    def _answer(self, fn: str, value: Any) -> Any:
        entry = self.fail.get(fn)
        if entry is None and isinstance(value, dict) and "error" in value and set(value) <= {"error", "code", "msg"}:
            entry = value
        if entry is not None:
            raise nvml_error(entry)
        return value

    def _dev(self, handle: int) -> dict[str, Any]:
        if handle in self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self.dump["devices"][handle]  # type: ignore[no-any-return]

    def nvmlInit(self) -> None:
        self._answer("nvmlInit", None)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._answer("nvmlSystemGetDriverVersion", self.dump["driver"])  # type: ignore[no-any-return]

    def nvmlSystemGetNVMLVersion(self) -> str:
        return self._answer("nvmlSystemGetNVMLVersion", self.dump["nvml"])  # type: ignore[no-any-return]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._answer("nvmlSystemGetCudaDriverVersion", self.dump["cuda_driver"])  # type: ignore[no-any-return]

    def nvmlDeviceGetCount(self) -> int:
        return self._answer("nvmlDeviceGetCount", len(self.dump["devices"]))  # type: ignore[no-any-return]

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return self._answer("nvmlDeviceGetHandleByIndex", index)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        simple = {
            "nvmlDeviceGetUUID": "UUID",
            "nvmlDeviceGetName": "Name",
            "nvmlDeviceGetMemoryInfo": "MemoryInfo",
            "nvmlDeviceGetCudaComputeCapability": "CudaComputeCapability",
            "nvmlDeviceGetMigMode": "MigMode",
            "nvmlDeviceGetPciInfo": "PciInfo",
            "nvmlDeviceGetNumaNodeId": "NumaNodeId",
            "nvmlDeviceGetEccMode": "EccMode",
            "nvmlDeviceGetRetiredPagesPendingStatus": "RetiredPagesPendingStatus",
            "nvmlDeviceGetRemappedRows": "RemappedRows",
        }
        if name in simple:
            return lambda handle: self._answer(name, self._dev(handle).get(simple[name], {"code": 3, "error": "x"}))
        raise AttributeError(name)

    def nvmlDeviceGetCpuAffinity(self, handle: int, words: int) -> list[int]:
        return self._answer("nvmlDeviceGetCpuAffinity", self._dev(handle)["CpuAffinity"])  # type: ignore[no-any-return]

    def nvmlDeviceGetMemoryAffinity(self, handle: int, words: int, scope: int) -> list[int]:
        return self._answer("nvmlDeviceGetMemoryAffinity", self._dev(handle)["MemoryAffinity"])  # type: ignore[no-any-return]

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self._answer("nvmlDeviceGetTemperature", self._dev(handle)["Temperature"])  # type: ignore[no-any-return]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: int, profile: str) -> Any:
        return self._answer("nvmlDeviceGetGpuInstanceProfileInfo", self._dev(handle)["gpuInstanceProfiles"][profile])

    def _link(self, handle: int, link: int) -> dict[str, Any]:
        links = self._dev(handle)["nvlinks"]
        return links[link] if link < len(links) else {"state": {"code": 2, "error": "NVMLError_InvalidArgument"}}

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        return self._answer("nvmlDeviceGetNvLinkState", self._link(handle, link)["state"])  # type: ignore[no-any-return]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> Any:
        return self._answer("nvmlDeviceGetNvLinkRemotePciInfo", self._link(handle, link)["remotePci"])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        return self._answer("nvmlDeviceGetNvLinkRemoteDeviceType", self._link(handle, link)["remoteType"])  # type: ignore[no-any-return]

    def nvmlDeviceGetNvLinkVersion(self, handle: int, link: int) -> int:
        return self._answer("nvmlDeviceGetNvLinkVersion", self._link(handle, link).get("version", 4))  # type: ignore[no-any-return]

    def nvmlDeviceGetGpuFabricInfoV(self, handle: int, ref: Any) -> int:
        info = self._answer("nvmlDeviceGetGpuFabricInfoV", self._dev(handle)["GpuFabricInfoV"])
        struct = ref._obj
        if "healthSummary" not in info and isinstance(struct, pynvml.c_nvmlGpuFabricInfo_v3_t):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return _fill_fabric(struct, info)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        table = self._dev(handle)["EccErrors"]
        kind = ("corrected", "uncorrected")[error_type]
        counter = ("volatile", "aggregate")[counter_type]
        return self._answer("nvmlDeviceGetTotalEccErrors", table[kind][counter])  # type: ignore[no-any-return]

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]:
        pages = self._answer("nvmlDeviceGetRetiredPages", self._dev(handle)["RetiredPages"])
        return [0x1000 * i for i in range(pages["doubleBit" if cause else "multipleSingleBit"])]

    # events
    def nvmlEventSetCreate(self) -> str:
        return self._answer("nvmlEventSetCreate", "set")  # type: ignore[no-any-return]

    def nvmlDeviceRegisterEvents(self, handle: int, mask: int, event_set: str) -> None:
        self._dev(handle)
        self._answer("nvmlDeviceRegisterEvents", self.refuse_events.get(handle))

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> Any:
        if self.events:
            return self.events.pop(0)
        time.sleep(0.01)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass


def backend_for(dump: dict[str, Any], tmp_path: Path, **fail: dict[str, Any]) -> tuple[NvmlBackend, FakeNvml]:
    fake = FakeNvml(dump, fail)
    return NvmlBackend(infiniband_root=tmp_path / "none", nvml=fake, watch_events=False), fake


@pytest.mark.parametrize("name", ["hgx-h100-8gpu", "gb200-nvl72-tray", "gb200-degraded-fabric"])
def test_what_the_backend_writes_parses_to_the_same_gpunode(load_dump_fixture: Load, tmp_path: Path, name: str) -> None:
    original = load_dump_fixture(name)
    backend, fake = backend_for(load_dump_fixture(name), tmp_path)
    captured = backend.read()
    backend.close()
    assert fake.shutdown
    want = build_status(parse_dump(original), now=NOW)
    got = build_status(parse_dump(captured), now=NOW)
    assert got.gpus[0].nvlink_peers == want.gpus[0].nvlink_peers
    assert [g.model_dump(exclude={"health"}) for g in got.gpus] == [g.model_dump(exclude={"health"}) for g in want.gpus]
    assert got.nvlink_domain == want.nvlink_domain
    # A one-shot read does not watch events, and says so.
    assert {u.what for u in got.unknown} - {u.what for u in want.unknown} == {
        f"gpu{i}.xidEvents" for i in range(len(got.gpus))
    }


CALLS = [
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetMemoryAffinity",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetTemperature",
    "nvmlSystemGetDriverVersion",
]
ERRORS = {
    "NotSupported": {"code": 3, "error": "NVMLError_NotSupported"},
    "NoPermission": {"code": 4, "error": "NVMLError_NoPermission"},
    "Unknown": {"code": 999, "error": "NVMLError_Unknown"},
}


@pytest.mark.parametrize("error", sorted(ERRORS))
@pytest.mark.parametrize("call", CALLS)
def test_any_call_may_fail(load_dump_fixture: Load, tmp_path: Path, call: str, error: str) -> None:
    backend, _ = backend_for(load_dump_fixture("hgx-h100-8gpu"), tmp_path, **{call: ERRORS[error]})
    status = build_status(parse_dump(backend.read()), now=NOW)
    assert len(status.gpus) == 8
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.status == "True"
    if call not in (
        "nvmlSystemGetDriverVersion",
        "nvmlDeviceGetNvLinkRemotePciInfo",
        "nvmlDeviceGetGpuInstanceProfileInfo",
    ):
        assert any(error in u.reason for u in status.unknown), status.unknown


def test_a_failing_handle_costs_one_gpu_and_init_failure_costs_the_node(
    load_dump_fixture: Load, tmp_path: Path
) -> None:
    backend, _ = backend_for(load_dump_fixture("hgx-h100-8gpu"), tmp_path, nvmlDeviceGetHandleByIndex=ERRORS["Unknown"])
    status = build_status(parse_dump(backend.read()), now=NOW)
    assert len(status.gpus) == 8 and not any(g.health.healthy for g in status.gpus)

    backend, _ = backend_for(load_dump_fixture("hgx-h100-8gpu"), tmp_path, nvmlInit={"code": 9, "error": "x"})
    status = build_status(parse_dump(backend.read()), now=NOW)
    assert status.gpus == [] and status.conditions[0].reason == "NVMLUnavailable"


def test_only_xid_events_count_and_they_stick(load_dump_fixture: Load, tmp_path: Path) -> None:
    fake = FakeNvml(load_dump_fixture("hgx-h100-8gpu"))
    clock_event = SimpleNamespace(eventType=16, eventData=0, device=0)  # what the H200 sent first
    xid_event = SimpleNamespace(eventType=8, eventData=79, device=3)
    app_fault = SimpleNamespace(eventType=8, eventData=13, device=3)
    fake.events = [clock_event, xid_event, app_fault]
    backend = NvmlBackend(infiniband_root=tmp_path, nvml=fake, watch_events=True)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            dump = backend.read()
            if dump["devices"][3]["XidEvents"] == {"13": 1, "79": 1}:
                break
            time.sleep(0.02)
        assert dump["devices"][3]["XidEvents"] == {"13": 1, "79": 1}
        assert all(d["XidEvents"] == {} for i, d in enumerate(dump["devices"]) if i != 3)
        status = build_status(parse_dump(dump), now=NOW)
        assert [g.index for g in status.gpus if not g.health.healthy] == [3]
        assert status.gpus[3].health.reasons == ["XID 79 (GPU has fallen off the bus) seen 1x"]
    finally:
        backend.close()
    assert not any(t.name == "nvml-xid-events" and t.is_alive() for t in threading.enumerate())


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_a_gpu_that_refuses_xid_registration_has_its_xids_unknown_not_zero(
    load_dump_fixture: Load, tmp_path: Path, error: str
) -> None:
    """Refused registration (NotSupported, any NVML error): the agent did not watch, so it must not
    say "no XIDs"; the other GPUs are still watched and the agent keeps running."""
    fake = FakeNvml(load_dump_fixture("hgx-h100-8gpu"))
    fake.refuse_events[2] = ERRORS[error]
    backend = NvmlBackend(infiniband_root=tmp_path / "none", nvml=fake, watch_events=True)
    try:
        readings = parse_dump(backend.read())
        status = build_status(readings, now=NOW)
        unknown = {u.what: u.reason for u in status.unknown}
        assert unknown["gpu2.xidEvents"].startswith(str(ERRORS[error]["error"])), unknown
        assert [w for w in unknown if w.endswith(".xidEvents")] == ["gpu2.xidEvents"]
        assert readings.gpus[2].xid_counts is None and readings.gpus[3].xid_counts == {}
        assert status.gpus[2].health.healthy  # unknown, as every unknown reading: not unhealthy
        metrics = AgentMetrics()
        metrics.observe("n1", readings, {g.index: g.health.healthy for g in status.gpus})
        assert metrics.registry.get_sample_value("kubegang_agent_unknown_readings", {"node": "n1"}) == len(unknown)

        fake.events.append(SimpleNamespace(eventType=8, eventData=79, device=3))
        deadline = time.monotonic() + 5
        while backend.read()["devices"][3]["XidEvents"] != {"79": 1} and time.monotonic() < deadline:
            time.sleep(0.02)
        dump = backend.read()
        assert dump["devices"][3]["XidEvents"] == {"79": 1}
        assert "error" in dump["devices"][2]["XidEvents"]
    finally:
        backend.close()


def test_a_gpu_that_answers_gpu_is_lost_is_unhealthy(load_dump_fixture: Load, tmp_path: Path) -> None:
    """NVML_ERROR_GPU_IS_LOST is a verdict on the GPU (fallen off the bus), not a refused reading:
    the GPU is unhealthy, named in GPUHealthy, and not counted among the healthy GPUs placement uses."""
    fake = FakeNvml(load_dump_fixture("hgx-h100-8gpu"))
    fake.lost.add(4)
    backend = NvmlBackend(infiniband_root=tmp_path / "none", nvml=fake, watch_events=True)
    try:
        status = build_status(parse_dump(backend.read()), now=NOW)
    finally:
        backend.close()
    assert [g.index for g in status.gpus if not g.health.healthy] == [4]
    assert status.healthy_gpus == 7
    assert any("GPU is lost" in reason for reason in status.gpus[4].health.reasons), status.gpus[4].health
    healthy = next(c for c in status.conditions if c.type == "GPUHealthy")
    assert (healthy.status, healthy.reason) == ("False", "UnhealthyGPUs")
    assert "gpu 4: GPU is lost" in healthy.message
    assert any(u.what == "gpu4.temperature" and "GpuIsLost" in u.reason for u in status.unknown)


def test_plain_converts_ctypes_structures() -> None:
    from kubegang.agent._nvml import plain

    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    info.cliqueId = 5
    info.clusterUuid[:] = list(range(16))
    out = plain(info)
    assert out["cliqueId"] == 5 and out["clusterUuid"] == list(range(16))
    assert plain(ctypes.create_string_buffer(b"NVIDIA H200", 32).value) == "NVIDIA H200"


def test_a_failed_init_is_tried_again_at_the_next_poll(load_dump_fixture: Load, tmp_path: Path) -> None:
    """A driver container that starts after the agent: the node gets its GPUs without a restart."""
    backend, fake = backend_for(load_dump_fixture("hgx-h100-8gpu"), tmp_path, nvmlInit={"code": 9, "error": "x"})
    assert build_status(parse_dump(backend.read()), now=NOW).conditions[0].reason == "NVMLUnavailable"
    del fake.fail["nvmlInit"]  # the driver is loaded now
    status = build_status(parse_dump(backend.read()), now=NOW)
    assert len(status.gpus) == 8 and status.conditions[0].status == "True", status.conditions
    backend.close()
    assert fake.shutdown


class LegacyFabricNvml(FakeNvml):
    """A driver older than nvmlDeviceGetGpuFabricInfoV: only the legacy fabric call answers."""

    c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t

    def nvmlDeviceGetGpuFabricInfo(self, handle: int, ref: Any) -> int:
        return _fill_fabric(ref._obj, self._dev(handle)["GpuFabricInfoV"])


def test_a_driver_without_the_versioned_fabric_call_is_read_by_the_legacy_one(
    load_dump_fixture: Load, tmp_path: Path
) -> None:
    """docs/agent.md: v3, then v2, then the legacy call."""
    expected = build_status(parse_dump(load_dump_fixture("gb200-nvl72-tray")), now=NOW).nvlink_domain
    assert expected is not None
    missing = {"code": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "error": "x"}
    fake = LegacyFabricNvml(load_dump_fixture("gb200-nvl72-tray"), {"nvmlDeviceGetGpuFabricInfoV": missing})
    backend = NvmlBackend(infiniband_root=tmp_path / "none", nvml=fake, watch_events=False)
    status = build_status(parse_dump(backend.read()), now=NOW)
    assert status.nvlink_domain is not None and status.nvlink_domain.id == expected.id, status.conditions
    backend.close()
