"""Any NVML call may fail on real hardware: the node is still published, the failure is listed in
``status.unknown``, and nothing else is lost."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from kubegang.agent import build_status, node_labels, parse_dump

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Load = Callable[[str], dict[str, Any]]

ERRORS: dict[str, dict[str, Any]] = {
    "NotSupported": {"code": 3, "error": "NVMLError_NotSupported", "msg": "Not Supported"},
    "NoPermission": {"code": 4, "error": "NVMLError_NoPermission", "msg": "Insufficient Permissions"},
    "InvalidArgument": {"code": 2, "error": "NVMLError_InvalidArgument", "msg": "Invalid Argument"},
    "GpuIsLost": {"code": 15, "error": "NVMLError_GpuIsLost", "msg": "GPU is lost"},
    "TypeError": {"error": "TypeError", "msg": "missing 1 required positional argument"},
}
# Dump key → the ``unknown`` entry it must produce when it fails.
READINGS = {
    "UUID": "uuid",
    "Name": "product",
    "MemoryInfo": "memory",
    "CudaComputeCapability": "computeCapability",
    "MigMode": "migMode",
    "gpuInstanceProfiles": "migProfiles",
    "PciInfo": "pciBusId",
    "MemoryAffinity": "numaNode",
    "CpuAffinity": "cpuAffinity",
    "nvlinks": "nvlink",
    "GpuFabricInfoV": "fabric",
    "EccErrors": "ecc",
    "RetiredPagesPendingStatus": "retiredPagesPending",
    "RemappedRows": "remappedRows",
    "Temperature": "temperature",
    "XidEvents": "xidEvents",
}


@pytest.mark.parametrize("error", sorted(ERRORS))
@pytest.mark.parametrize("key", sorted(READINGS))
def test_one_failed_call_costs_one_reading(load_dump_fixture: Load, key: str, error: str) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][2][key] = ERRORS[error]
    status = build_status(parse_dump(dump), now=NOW)

    assert len(status.gpus) == 8
    unknown = {u.what: u.reason for u in status.unknown}
    assert unknown[f"gpu2.{READINGS[key]}"].startswith(ERRORS[error]["error"])
    assert not any(w.startswith(("gpu1.", "gpu3.")) and "retired" not in w for w in unknown)
    # The other GPUs keep everything; the failing GPU keeps its other readings.
    assert status.gpus[3].uuid and status.gpus[3].nvlink_peers
    if key != "UUID":
        assert status.gpus[2].uuid is not None
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.status == "True"
    node_labels(status)  # labels still computable


@pytest.mark.parametrize("key", sorted(READINGS))
def test_a_missing_key_is_unknown_not_a_crash(load_dump_fixture: Load, key: str) -> None:
    dump = load_dump_fixture("gb200-nvl72-tray")
    del dump["devices"][0][key]
    status = build_status(parse_dump(dump), now=NOW)
    assert any(u.what == f"gpu0.{READINGS[key]}" and "not recorded" in u.reason for u in status.unknown)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MemoryInfo", {"total": "lots"}),
        ("CudaComputeCapability", [9]),
        ("MigMode", "on"),
        ("PciInfo", {}),
        ("CpuAffinity", [0, 0]),
        ("MemoryAffinity", [3]),
        ("GpuFabricInfoV", {"clusterUuid": [1, 2], "cliqueId": 1, "state": 3, "status": 0}),
        ("RemappedRows", [0, 0]),
        ("Temperature", 31.5),
        ("XidEvents", ["79"]),
        ("nvlinks", {"state": 1}),
        ("MemoryInfo", {"total": -1, "used": 0}),
        ("CudaComputeCapability", [-1, 0]),
        ("GpuFabricInfoV", {"clusterUuid": [1] * 16, "cliqueId": -5, "state": 3, "status": 0}),
        ("GpuFabricInfoV", {"clusterUuid": [1] * 16, "cliqueId": 10**40, "state": 3, "status": 0}),
    ],
)
def test_malformed_values_are_unknown(load_dump_fixture: Load, key: str, value: Any) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][0][key] = value
    status = build_status(parse_dump(dump), now=NOW)
    assert any(u.what == f"gpu0.{READINGS[key]}" and "malformed" in u.reason for u in status.unknown)
    assert len(status.gpus) == 8


def test_a_gpu_whose_handle_fails_is_listed_unhealthy(load_dump_fixture: Load) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][5] = {"index": 5, "handle": ERRORS["GpuIsLost"]}
    status = build_status(parse_dump(dump), now=NOW)
    lost = status.gpus[5]
    assert lost.index == 5 and lost.uuid is None and not lost.health.healthy
    assert "GPU is lost" in lost.health.reasons[0]
    assert all(g.health.healthy for g in status.gpus if g.index != 5)
    assert node_labels(status)["nvidia.com/gpu.count"] == "8"  # the GPU is there, just sick


LOST_AT: list[tuple[str | int, ...]] = [
    *((key,) for key in sorted(READINGS)),
    ("RetiredPages",),
    ("EccErrors", "uncorrected", "volatile"),
    ("nvlinks", 0, "state"),
]


@pytest.mark.parametrize("path", LOST_AT, ids=[".".join(map(str, path)) for path in LOST_AT])
def test_a_reading_that_answers_gpu_is_lost_makes_the_gpu_unhealthy(
    load_dump_fixture: Load, path: tuple[str | int, ...]
) -> None:
    """NVML_ERROR_GPU_IS_LOST says the GPU fell off the bus: unlike a refused reading, it is a verdict
    on the GPU. Decided by the NVML code, so the message text does not matter."""
    dump = load_dump_fixture("hgx-h100-8gpu")
    *parents, last = path
    holder: Any = dump["devices"][2]
    for step in parents:
        holder = holder[step]
    holder[last] = ERRORS["GpuIsLost"]
    status = build_status(parse_dump(dump), now=NOW)
    assert [g.index for g in status.gpus if not g.health.healthy] == [2]
    assert any("GPU is lost" in reason for reason in status.gpus[2].health.reasons)
    assert next(c for c in status.conditions if c.type == "GPUHealthy").status == "False"

    # Another error, even one whose text says "lost", is only an unknown reading.
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][2]["Temperature"] = {**ERRORS["GpuIsLost"], "code": 999, "error": "NVMLError_Unknown"}
    status = build_status(parse_dump(dump), now=NOW)
    assert all(g.health.healthy for g in status.gpus)


def test_nvml_init_failure_publishes_a_not_ready_node() -> None:
    dump = {
        "init": {"code": 9, "error": "NVMLError_DriverNotLoaded", "msg": "Driver Not Loaded"},
        "devices": [],
    }
    status = build_status(parse_dump(dump), now=NOW)
    conditions = {c.type: c for c in status.conditions}
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "NVMLUnavailable")
    assert "Driver Not Loaded" in conditions["Ready"].message
    assert conditions["GPUHealthy"].status == "Unknown"
    assert status.gpus == [] and status.nvlink_domain is None


def test_every_link_refused_is_one_unknown_and_nonexistent_links_are_not(load_dump_fixture: Load) -> None:
    h200 = build_status(parse_dump(load_dump_fixture("h200-sxm-1gpu")), now=NOW)
    assert [u.reason for u in h200.unknown if u.what == "gpu0.nvlink"] == [
        "NVMLError_NotSupported: Not Supported (all 36 links)"
    ]
    # Links 18..35 of an H100 answer InvalidArgument: they do not exist, which is not unknown.
    h100 = build_status(parse_dump(load_dump_fixture("hgx-h100-8gpu")), now=NOW)
    assert not any(u.what.endswith(".nvlink") for u in h100.unknown)


def test_the_legacy_fabric_call_is_used_when_the_versioned_one_fails(load_dump_fixture: Load) -> None:
    dump = load_dump_fixture("gb200-nvl72-tray")
    for device in dump["devices"]:
        legacy = dict(device["GpuFabricInfoV"])
        for key in ("version", "healthMask", "healthSummary"):
            legacy.pop(key)
        device["GpuFabricInfo"] = legacy
        device["GpuFabricInfoV"] = ERRORS["NotSupported"]
    status = build_status(parse_dump(dump), now=NOW)
    assert status.nvlink_domain is not None and status.nvlink_domain.health is None


@pytest.mark.parametrize(
    ("words", "cpus"),
    [
        ([2**64 - 1, 255, 0, 0], "0-71"),  # the GB200 tray: 72 Grace cores
        ([0, 1 << 63], "127"),
        ([-1], "0-63"),  # a signed reading of a full word is still 64 CPUs
        ([(1 << 70) | 5], "0,2"),  # bits above a word's 64 are not CPUs
    ],
)
def test_cpu_affinity_masks_decode_word_by_word(load_dump_fixture: Load, words: list[int], cpus: str) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][0]["CpuAffinity"] = words
    status = build_status(parse_dump(dump), now=NOW)
    assert status.gpus[0].cpu_affinity == cpus


@pytest.mark.parametrize("entry", [None, "x", 5])
def test_a_link_entry_that_is_not_an_object_is_one_error_not_a_crash(load_dump_fixture: Load, entry: Any) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][0]["nvlinks"] = [entry]
    status = build_status(parse_dump(dump), now=NOW)
    assert len(status.gpus) == 8 and any(u.what == "gpu0.nvlink" for u in status.unknown), status.unknown


@pytest.mark.parametrize("uncorrected", [None, 5, "x"])
def test_an_ecc_table_entry_that_is_not_an_object_is_unknown(load_dump_fixture: Load, uncorrected: Any) -> None:
    dump = load_dump_fixture("hgx-h100-8gpu")
    dump["devices"][0]["EccErrors"]["uncorrected"] = uncorrected
    status = build_status(parse_dump(dump), now=NOW)
    assert any(u.what.startswith("gpu0.ecc.uncorrected") for u in status.unknown), status.unknown
    assert len(status.gpus) == 8
