"""Which GPUs of a node a pod gets: NVLink, PCIe switch and NUMA distance (``kubegang.placement._gpus``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubegang.api.gpunode import GPUNodeStatus
from kubegang.extender._nodes import node_info
from kubegang.placement import Allocation, GangRequest, Placement, Snapshot, choose_gpus, plan, wiring_of
from kubegang.topology import DUMP_LAYOUTS, LAYOUTS, GPUInfo, GpuLayout, NodeInfo, compile_index, layout

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"


def board(name: str, nodes: int = 1) -> Snapshot:
    wired = layout(name)
    return Snapshot(compile_index([
        NodeInfo(f"n{i}", {}, wired.dress(tuple(GPUInfo(j, "H100") for j in range(wired.gpus))))
        for i in range(nodes)
    ]))


def take(snapshot: Snapshot, owner: str, gpus: tuple[int, ...], node: str = "n0") -> None:
    snapshot.allocate(Allocation(owner, 0, node, gpus))


def placed(snapshot: Snapshot, gang: GangRequest) -> list[tuple[int, ...]]:
    result = plan(gang, snapshot)
    assert isinstance(result, Placement), result
    snapshot.allocate_all(result.allocations(gang))
    return [a.gpus for a in result.assignments]


def test_a_4_gpu_pod_on_an_empty_pcie_server_gets_one_socket() -> None:
    assert placed(board("pcie-8gpu"), GangRequest("p", gpus_per_pod=4)) == [(0, 1, 2, 3)]


def test_a_2_gpu_pod_gets_two_gpus_under_one_pcie_switch_not_the_lowest_free_ones() -> None:
    snapshot = board("pcie-8gpu")
    take(snapshot, "one", (0,))
    # Lowest free would be 1 and 2, which only share the socket; 2 and 3 share a switch.
    assert placed(snapshot, GangRequest("pair", gpus_per_pod=2)) == [(2, 3)]


def test_single_gpus_fill_beside_those_taken_so_a_socket_stays_whole() -> None:
    snapshot = board("pcie-8gpu")
    take(snapshot, "a", (5,))
    # GPU 4 shares 5's switch and leaves NUMA 0 whole; GPU 0 (lowest) would break both sockets.
    assert placed(snapshot, GangRequest("b")) == [(4,)]
    assert placed(snapshot, GangRequest("c", gpus_per_pod=4)) == [(0, 1, 2, 3)]


def test_two_pods_of_a_gang_on_one_node_get_one_socket_each() -> None:
    snapshot = board("pcie-8gpu")
    assert sorted(placed(snapshot, GangRequest("g", pods=2, gpus_per_pod=4))) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_on_nvswitch_boards_the_pod_keeps_to_one_numa_node_then_one_pcie_switch() -> None:
    snapshot = board("hgx-8gpu-nvswitch")
    take(snapshot, "a", (1,))
    # Every pair is NVLinked: the socket decides (4..7 is the only whole one), then the switches.
    assert placed(snapshot, GangRequest("four", gpus_per_pod=4)) == [(4, 5, 6, 7)]
    assert placed(snapshot, GangRequest("two", gpus_per_pod=2)) == [(2, 3)]


def test_nvlink_outranks_a_shared_pcie_switch_on_the_cube_mesh() -> None:
    snapshot = board("sxm2-8gpu-cube-mesh")
    take(snapshot, "a", (1, 2, 3))
    # Free: 0 and the quad 4..7; 0 is NVLinked to 4 only. (4, 5) and (6, 7) are both NVLinked pairs
    # on one switch and socket; (6, 7) leaves 0, 4, 5 linked together, (4, 5) would strand 0.
    assert placed(snapshot, GangRequest("pair", gpus_per_pod=2)) == [(6, 7)]
    # (0, 4) is NVLinked too but crosses the sockets; (4, 5) does not.
    assert placed(snapshot, GangRequest("next", gpus_per_pod=2)) == [(4, 5)]


def test_a_node_without_wiring_gets_the_lowest_free_gpus_as_before() -> None:
    snapshot = Snapshot(compile_index([NodeInfo("n0", {}, tuple(GPUInfo(j, "H100") for j in range(8)))]))
    assert snapshot.gpu_wiring[0] is None
    take(snapshot, "a", (0,))
    assert placed(snapshot, GangRequest("pair", gpus_per_pod=2)) == [(1, 2)]
    assert choose_gpus(None, [3, 5, 7], 2) == (3, 5)


def test_a_share_of_a_gpu_goes_beside_the_gpus_taken() -> None:
    snapshot = board("pcie-8gpu")
    take(snapshot, "a", (6,))
    assert placed(snapshot, GangRequest("half", gpus_per_pod=0, gpu_fraction_milli=500)) == [(7,)]


def test_gpu_indices_not_positions_name_the_chosen_gpus() -> None:
    wired = layout("pcie-4gpu").dress(tuple(GPUInfo(i, "H100") for i in (10, 11, 20, 21)))
    snapshot = Snapshot(compile_index([NodeInfo("n0", {}, wired)]))
    take(snapshot, "a", (10,))
    assert placed(snapshot, GangRequest("pair", gpus_per_pod=2)) == [(20, 21)]


def test_many_gpus_are_chosen_greedily_by_the_same_rule() -> None:
    gpus = tuple(GPUInfo(j, "H100", numa_node=j // 8, pcie_switch=f"s{j // 4}") for j in range(16))
    wiring = wiring_of(gpus)
    assert wiring is not None
    assert wiring.choose(list(range(1, 16)), 8) == tuple(range(8, 16))


def test_wiring_is_interned_and_answers_are_memoised() -> None:
    a, b = board("pcie-8gpu", nodes=2).gpu_wiring
    assert a is b and a is not None
    assert a.choose([0, 1, 2, 3, 4], 2) is a.choose([0, 1, 2, 3, 4], 2)


@pytest.mark.parametrize("dump", sorted(DUMP_LAYOUTS))
def test_the_agents_reading_of_each_replayed_board_is_the_layout_the_simulator_uses(dump: str) -> None:
    status = GPUNodeStatus.model_validate(json.loads((FIXTURES / f"{dump}.expected.json").read_text())["status"])
    count = len(status.gpus)
    node = {"metadata": {"name": "n0"}, "status": {"allocatable": {"nvidia.com/gpu": str(count)}}}
    info = node_info(node, status)
    assert info is not None
    expected = LAYOUTS[DUMP_LAYOUTS[dump]].dress(info.gpus)
    # The agent reads NUMA nodes and NVLink peers; it reads no PCIe switch (yet).
    assert [(g.numa_node, g.nvlink_peers) for g in info.gpus] == [(g.numa_node, g.nvlink_peers) for g in expected]


def test_bad_wiring_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="numa_node"):
        GPUInfo(0, numa_node=-1)
    with pytest.raises(ValueError, match="nvlink_peers"):
        GPUInfo(0, nvlink_peers=frozenset({0}))
    with pytest.raises(ValueError, match="both ways"):
        GpuLayout("bad", (0, 0), (None, None), (frozenset({1}), frozenset()))
    with pytest.raises(ValueError, match="wires 8 GPUs"):
        layout("pcie-8gpu").dress((GPUInfo(0),))
    with pytest.raises(ValueError, match="known: gb200-tray"):
        layout("nope")
