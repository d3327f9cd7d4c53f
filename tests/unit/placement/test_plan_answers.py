"""What `plan` answers beyond a placement: gangs no node could ever hold, and a preferred domain."""

from __future__ import annotations

from kubegang.levels import Level
from kubegang.placement import Allocation, GangRequest, Placement, Snapshot, Unplaceable, plan
from kubegang.topology import GPUInfo, NodeInfo, compile_index


def _snapshot(sizes: dict[str, int]) -> Snapshot:
    nodes = [NodeInfo(name, {"kubegang.io/leaf": "l0"}, tuple(GPUInfo(j, "H100") for j in range(count)))
             for name, count in sizes.items()]
    return Snapshot(compile_index(nodes))


def test_a_pod_larger_than_the_largest_node_is_never_placeable_and_names_it() -> None:
    result = plan(GangRequest(id="g", pods=2, gpus_per_pod=9), _snapshot({"a": 4, "b": 8}))
    assert isinstance(result, Unplaceable) and result.never
    assert result.reason == "each pod needs 9 GPUs, but the largest GPU node (b) has 8"


def test_a_product_no_node_has_is_never_placeable() -> None:
    result = plan(GangRequest(id="g", gpus_per_pod=1, gpu_product="B200"), _snapshot({"a": 8}))
    assert isinstance(result, Unplaceable) and result.never


def test_a_gang_that_fits_once_gpus_free_up_is_not_never() -> None:
    snapshot = _snapshot({"a": 8, "b": 8})
    snapshot.allocate(Allocation("other", 0, "a", tuple(range(8))))
    result = plan(GangRequest(id="g", pods=2, gpus_per_pod=8), snapshot)
    assert isinstance(result, Unplaceable) and not result.never


def test_a_restarted_gang_prefers_the_domain_it_last_ran_in() -> None:
    nodes = [NodeInfo(f"n{i}", {"kubegang.io/leaf": f"l{i // 2}"}, tuple(GPUInfo(j, "H100") for j in range(8)))
             for i in range(6)]
    snapshot = Snapshot(compile_index(nodes))
    first = plan(GangRequest(id="g", pods=2, gpus_per_pod=8), snapshot)
    assert isinstance(first, Placement) and first.domain == "l0"  # ties: the first leaf
    again = plan(GangRequest(id="g", pods=2, gpus_per_pod=8, preferred_domain="l2"), snapshot)
    assert isinstance(again, Placement) and again.domain == "l2" and set(again.nodes) == {"n4", "n5"}


def test_a_gang_larger_than_its_required_domain_could_ever_hold_is_never_placeable() -> None:
    nodes = [NodeInfo(f"n{i}", {"kubegang.io/leaf": f"l{i // 2}"}, tuple(GPUInfo(j, "H100") for j in range(8)))
             for i in range(4)]
    snapshot = Snapshot(compile_index(nodes))
    three_in_a_leaf = plan(GangRequest(id="g", pods=3, gpus_per_pod=8, required_level=Level.LEAF), snapshot)
    assert isinstance(three_in_a_leaf, Unplaceable) and three_in_a_leaf.never
    assert three_in_a_leaf.reason.endswith("no leaf could ever hold it (at most 2 with every GPU free)")
    five = plan(GangRequest(id="g", pods=5, gpus_per_pod=8), snapshot)
    assert isinstance(five, Unplaceable) and five.never
    snapshot.allocate(Allocation("other", 0, "n0", tuple(range(8))))
    four = plan(GangRequest(id="g", pods=4, gpus_per_pod=8), snapshot)
    assert isinstance(four, Unplaceable) and not four.never  # it fits once n0 is free again
