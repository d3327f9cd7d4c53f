"""What `plan` answers beyond a placement: gangs no node could ever hold, and a preferred domain."""

from __future__ import annotations

from kubegang.placement import GangRequest, Placement, Snapshot, Unplaceable, plan
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
    result = plan(GangRequest(id="g", pods=3, gpus_per_pod=8), snapshot)
    assert isinstance(result, Unplaceable) and not result.never


def test_a_restarted_gang_prefers_the_domain_it_last_ran_in() -> None:
    nodes = [NodeInfo(f"n{i}", {"kubegang.io/leaf": f"l{i // 2}"}, tuple(GPUInfo(j, "H100") for j in range(8)))
             for i in range(6)]
    snapshot = Snapshot(compile_index(nodes))
    first = plan(GangRequest(id="g", pods=2, gpus_per_pod=8), snapshot)
    assert isinstance(first, Placement) and first.domain == "l0"  # ties: the first leaf
    again = plan(GangRequest(id="g", pods=2, gpus_per_pod=8, preferred_domain="l2"), snapshot)
    assert isinstance(again, Placement) and again.domain == "l2" and set(again.nodes) == {"n4", "n5"}
