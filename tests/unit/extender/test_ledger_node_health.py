"""Which GPUs a node has, and which are healthy, as the ledger reads them.

- The GPUs are the node's devices (``status.capacity``): an unhealthy GPU lowers allocatable, and
  counting allocatable made the node's *highest* index vanish (a pod running on GPUs 4-7 lost GPU 7,
  became unplaced and displaced plans it never touched).
- A bound pod that does not fit displaces only plans on its GPUs, and none when that cannot help.
- A quarantined node keeps its GPUNode's GPU health; only the NVLink domain and UUIDs are set aside.
- While the agent cannot use NVML it publishes no GPUs: the health last read stays.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from kubegang.agent import build_status, parse_dump
from kubegang.api.gpunode import GPUNodeStatus
from kubegang.extender._ledger import Ledger
from kubegang.extender._nodes import node_info

from .test_ledger import demand, free, make, node, pod

FIXTURE = Path(__file__).parents[2] / "fixtures" / "nvml" / "hgx-h100-8gpu.nvml.json"


def _node(name: str = "n0", *, capacity: int | None = 8, allocatable: int = 8, **kw: Any) -> dict[str, Any]:
    body = node(name, allocatable, **kw)
    if capacity is not None:
        body["status"]["capacity"] = {"nvidia.com/gpu": str(capacity)}
    return body


def _health(ledger: Ledger, name: str = "n0") -> dict[int, bool]:
    return {g["index"]: g["healthy"] for g in ledger.snapshot()["nodes"][name]["gpus"]}


def _status(unhealthy: set[int], count: int = 8, **extra: Any) -> GPUNodeStatus:
    return GPUNodeStatus.model_validate({
        "gpus": [{"index": i, "health": {"healthy": i not in unhealthy, "reasons": ["Xid 79"] * (i in unhealthy)}}
                 for i in range(count)], **extra})


def _running(ledger: Ledger) -> None:
    ledger.upsert_pod(pod("a", 4, node_name="n0", pinned="n0", gpu_idx="4,5,6,7", job="J", index=0))  # running
    ledger.upsert_pod(pod("k0", 2, pinned="n0", gpu_idx="0,1", job="K", index=0))                    # planned


def test_an_unhealthy_gpu_the_gpunode_names_is_that_gpu_not_the_highest_index() -> None:
    ledger = make(1)
    _running(ledger)
    ledger.upsert_gpunode("n0", _status({3}))
    ledger.upsert_node(_node(allocatable=7))        # kubelet: capacity 8, allocatable 7
    snap = ledger.snapshot()
    assert _health(ledger) == {i: i != 3 for i in range(8)}
    assert snap["unplaced"] == {} and ledger._displaced == {}
    assert free(ledger) == {"n0": 1}                 # GPU 2
    assert ledger.filter(demand(2), ["n0"]).passed == []


def test_without_a_gpunode_the_unhealthy_gpus_are_chosen_away_from_the_pods() -> None:
    ledger = make(1)
    _running(ledger)
    ledger.upsert_node(_node(allocatable=7))
    assert _health(ledger) == {i: i != 3 for i in range(8)}     # 4-7 run a pod, 0-1 are planned
    assert ledger.snapshot()["unplaced"] == {} and ledger._displaced == {}
    assert free(ledger) == {"n0": 1}
    # A pod bound later onto the GPU chosen: chosen again, elsewhere.
    ledger.upsert_pod(pod("b", 1, node_name="n0", gpu_idx="3"))
    assert _health(ledger) == {i: i != 2 for i in range(8)} and ledger.snapshot()["unplaced"] == {}


def test_without_pods_the_highest_index_is_the_one_taken_and_capacity_alone_falls_back_to_allocatable() -> None:
    info = node_info(_node(allocatable=6))
    assert info is not None and [g.healthy for g in info.gpus] == [True] * 6 + [False] * 2
    info = node_info(_node(capacity=None, allocatable=6))
    assert info is not None and len(info.gpus) == 6 and all(g.healthy for g in info.gpus)
    # The GPUNode names more unhealthy GPUs than kubelet took out: those, no more.
    info = node_info(_node(allocatable=7), _status({1, 2}))
    assert info is not None and [i for i, g in enumerate(info.gpus) if not g.healthy] == [1, 2]
    # A device plugin restarting: every GPU there, none usable.
    info = node_info(_node(allocatable=0))
    assert info is not None and len(info.gpus) == 8 and not any(g.healthy for g in info.gpus)


def test_a_bound_pod_displaces_only_the_plans_on_its_gpus() -> None:
    """(A guard: bound pods with known indices are replayed before every plan, so only the plan on
    their GPUs ever loses, here as before.)"""
    ledger = make(1)
    ledger.upsert_pod(pod("k0", 2, pinned="n0", gpu_idx="0,1", job="K", index=0))
    ledger.upsert_pod(pod("m0", 2, pinned="n0", gpu_idx="4,5", job="M", index=0))
    ledger.upsert_pod(pod("x", 4, node_name="n0", gpu_idx="4,5,6,7"))   # another scheduler's pod
    assert sorted(ledger.snapshot()["unplaced"]) == ["m0"]
    assert set(ledger._displaced) == {"M"}
    assert "n0" in ledger.filter(demand(2, uid="k0", pinned_node="n0", pinned_gpus=(0, 1), job_uid="K",
                                        pod_index=0), ["n0"]).passed


def test_a_bound_pod_that_cannot_fit_anyway_displaces_nothing() -> None:
    ledger = make(1)
    ledger.upsert_pod(pod("k0", 2, pinned="n0", gpu_idx="0,1", job="K", index=0))
    ledger.upsert_node(_node(allocatable=8))
    ledger.upsert_gpunode("n0", _status({7}))
    ledger.upsert_pod(pod("x", 4, node_name="n0", gpu_idx="0,5,6,7"))  # on a GPU that is unhealthy now
    assert sorted(ledger.snapshot()["unplaced"]) == ["x"] and ledger._displaced == {}


def test_a_quarantined_node_keeps_the_health_its_gpunode_reports() -> None:
    domain = {"nvlinkDomain": {"id": "c0ffee.1", "clusterUuid": "c0ffee", "cliqueId": 1, "state": "Completed",
                               "status": "Success"}}
    ledger = Ledger()
    # Two trays of one NVLink domain cabled to different leaves: the topology is inconsistent.
    ledger.replace_all([_node("n0", leaf="leaf-a"), _node("n1", leaf="leaf-b")],
                       {"n0": _status(set(), **domain), "n1": _status(set(range(8)), **domain)}, [], [])
    snap = ledger.snapshot()
    assert list(snap["quarantined"]) == ["n1"] and "NVLink domain and GPU UUIDs ignored" in snap["quarantined"]["n1"]
    assert _health(ledger, "n1") == dict.fromkeys(range(8), False)
    assert ledger.filter(demand(8), ["n0", "n1"]).passed == ["n0"]


def test_a_gpu_reported_by_two_nodes_keeps_each_nodes_health() -> None:
    def uuids(unhealthy: set[int]) -> GPUNodeStatus:
        return GPUNodeStatus.model_validate({"gpus": [
            {"index": i, "uuid": f"GPU-{i}", "health": {"healthy": i not in unhealthy}} for i in range(8)]})

    ledger = Ledger()
    ledger.replace_all([_node("n0"), _node("n1")], {"n0": uuids({0}), "n1": uuids({5})}, [], [])
    assert set(ledger.snapshot()["quarantined"]) == {"n0", "n1"}
    assert _health(ledger, "n0") == {i: i != 0 for i in range(8)}
    assert _health(ledger, "n1") == {i: i != 5 for i in range(8)}


def _agent_statuses() -> tuple[GPUNodeStatus, GPUNodeStatus]:
    """The agent's two polls: GPU 3 lost, then NVML itself unusable (no GPUs, Ready=False NVMLUnavailable)."""
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    dump = json.loads(FIXTURE.read_text())
    dump["devices"][3]["handle"] = {"code": 15, "error": "NVMLError_GPUIsLost", "msg": "GPU is lost"}
    first = build_status(parse_dump(dump), now=now)
    lost = {"infiniband": dump.get("infiniband", []), "devices": [],
            "init": {"code": 15, "error": "NVMLError_GPUIsLost", "msg": "GPU is lost"}}
    second = build_status(parse_dump(lost), now=now, previous=first)
    assert second.gpus == [] and any(c.reason == "NVMLUnavailable" for c in second.conditions)
    # As the watch delivers them: through the API's JSON.
    return (GPUNodeStatus.model_validate(first.model_dump(by_alias=True)),
            GPUNodeStatus.model_validate(second.model_dump(by_alias=True)))


def test_while_nvml_is_unavailable_the_health_last_read_stays() -> None:
    first, second = _agent_statuses()
    ledger = make(1)
    ledger.upsert_gpunode("n0", first)
    assert free(ledger) == {"n0": 7}
    ledger.upsert_gpunode("n0", second)
    assert free(ledger) == {"n0": 7} and ledger.filter(demand(8), ["n0"]).passed == []
    ledger.upsert_gpunode("n0", second)                               # still unavailable a poll later
    assert _health(ledger) == {i: i != 3 for i in range(8)}
    ledger.upsert_gpunode("n0", _status(set()))                       # NVML back, GPU 3 reset: healthy
    assert free(ledger) == {"n0": 8}


def test_with_no_health_read_yet_the_node_alone_says() -> None:
    _, second = _agent_statuses()
    ledger = Ledger()
    ledger.replace_all([_node(allocatable=7)], {"n0": second}, [], [])
    assert free(ledger) == {"n0": 7}
    # And an extender that relists keeps what it knew.
    first, _ = _agent_statuses()
    ledger.upsert_gpunode("n0", first)
    ledger.replace_all([_node()], {"n0": second}, [], [])
    assert _health(ledger) == {i: i != 3 for i in range(8)}
