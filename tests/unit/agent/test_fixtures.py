"""Every NVML fixture (the real H200 capture and the synthetic ones) becomes exactly its expected
GPUNode status and labels, and the expected files say what the public topology facts say."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kubegang.agent import build_status, load_dump, node_labels, parse_dump, status_payload

NOW = datetime(2026, 1, 1, tzinfo=UTC)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"
DUMPS = sorted(p.name.removesuffix(".expected.json") for p in FIXTURES.glob("*.expected.json"))
Load = Callable[[str], dict[str, Any]]


def test_every_dump_has_an_expected_result() -> None:
    dumps = sorted(p.name.removesuffix(".nvml.json") for p in FIXTURES.glob("*.nvml.json"))
    assert dumps == DUMPS
    assert {"h200-sxm-1gpu", "hgx-h100-8gpu", "gb200-nvl72-tray", "gb200-degraded-fabric"} <= set(DUMPS)


@pytest.mark.parametrize("name", DUMPS)
def test_dump_yields_expected_status_and_labels(name: str) -> None:
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    status = build_status(parse_dump(load_dump(FIXTURES / f"{name}.nvml.json")), now=NOW)
    assert status_payload(status) == expected["status"]
    assert node_labels(status) == expected["labels"]


def test_h200_capture_reads_what_real_hardware_gave(load_dump_fixture: Load) -> None:
    status = build_status(parse_dump(load_dump_fixture("h200-sxm-1gpu")), now=NOW)
    (gpu,) = status.gpus
    assert (gpu.product, gpu.memory_mib, gpu.compute_capability) == ("NVIDIA H200", 143771, "9.0")
    # NUMA id is NotSupported in the VM, but the memory affinity mask says node 0 (topo -m agrees).
    assert (gpu.numa_node, gpu.cpu_affinity) == (0, "0-15")
    assert gpu.mig_mode == "disabled" and "7g.141gb" in gpu.mig_profiles and len(gpu.mig_profiles) == 7
    assert status.nvlink_domain is None  # fabric state 0 with a zero cluster UUID
    unknown = {u.what for u in status.unknown}
    assert {"gpu0.nvlink", "gpu0.retiredPages"} <= unknown
    assert gpu.health.healthy


def test_hgx_h100_is_nv18_all_to_all_through_nvswitch(load_dump_fixture: Load) -> None:
    status = build_status(parse_dump(load_dump_fixture("hgx-h100-8gpu")), now=NOW)
    assert len(status.gpus) == 8
    for gpu in status.gpus:
        assert sorted(p.index for p in gpu.nvlink_peers) == [i for i in range(8) if i != gpu.index]
        assert {(p.links, p.via) for p in gpu.nvlink_peers} == {(18, "nvswitch")}
    assert [g.numa_node for g in status.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    # Zero cluster UUID: registered, but not a multi-node domain.
    assert status.nvlink_domain is None
    assert len(status.hcas) == 8 and all(h.ports[0].rate == "400 Gb/sec (4X NDR)" for h in status.hcas)


def test_gb200_tray_claims_its_clique(load_dump_fixture: Load) -> None:
    status = build_status(parse_dump(load_dump_fixture("gb200-nvl72-tray")), now=NOW)
    domain = status.nvlink_domain
    assert domain is not None
    assert (domain.cluster_uuid, domain.clique_id) == ("7a1c3e52-9f4b-4c1d-8e2a-5b6f0d3c9a81", 32766)
    assert domain.id == "7a1c3e52-9f4b-4c1d-8e2a-5b6f0d3c9a81.32766"
    labels = node_labels(status)
    assert labels["nvidia.com/gpu.clique"] == labels["kubegang.io/nvlink-domain"] == domain.id
    assert labels["nvidia.com/gpu.count"] == "4"


def test_degraded_fabric_is_its_own_domain_and_reports_sick_gpus(load_dump_fixture: Load) -> None:
    status = build_status(parse_dump(load_dump_fixture("gb200-degraded-fabric")), now=NOW)
    assert status.nvlink_domain is None
    fabric = next(c for c in status.conditions if c.type == "NVLinkFabric")
    assert fabric.status == "False" and "Insufficient Resources" in fabric.message
    health = {g.index: g.health for g in status.gpus}
    assert not health[1].healthy and any("XID 74" in r for r in health[1].reasons)
    assert not any("XID 13" in r for r in health[1].reasons)  # an application fault, not the GPU's
    assert not health[3].healthy and health[0].healthy and health[2].healthy
    healthy = next(c for c in status.conditions if c.type == "GPUHealthy")
    assert (healthy.status, healthy.reason) == ("False", "UnhealthyGPUs")
    # Four links down on GPU 1: its NVSwitch paths carry 14 links, not 18.
    assert {p.links for p in status.gpus[1].nvlink_peers} == {14}
    labels = node_labels(status)
    assert labels["nvidia.com/gpu.clique"] is None and labels["kubegang.io/nvlink-domain"] is None
