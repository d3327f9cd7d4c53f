"""The ledger's decisions: reservations guarded, gangs pinned, restarts lossless, preemption whole."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.api.gpunode import GPUNodeStatus
from kubegang.extender._ledger import Ledger
from kubegang.extender._pods import DemandError, PodDemand, pod_demand
from kubegang.extender._wire import Pod
from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement


def node(name: str, gpus: int = 8, leaf: str = "leaf-a", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubegang.io/leaf": leaf, "nvidia.com/gpu.product": "H100",
                                              **labels}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}},
    }


def pod(uid: str, gpus: int, *, node_name: str = "", pinned: str = "", gpu_idx: str = "",
        job: str = "", index: int | None = None, phase: str = "Pending") -> dict[str, Any]:
    labels = {"kubegang.io/job-uid": job} if job else {}
    if index is not None:
        labels["kubegang.io/replica-index"] = str(index)
    annotations = {"kubegang.io/node": pinned} if pinned else {}
    if gpu_idx:
        annotations["kubegang.io/gpus"] = gpu_idx
    return {
        "metadata": {"name": f"p-{uid}", "namespace": "ns", "uid": uid, "labels": labels,
                     "annotations": annotations},
        "spec": {"nodeName": node_name,
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": phase},
    }


def demand(gpus: int, uid: str = "x", **kw: Any) -> PodDemand:
    return PodDemand(uid=uid, namespace="ns", name=uid, gpus=gpus, **kw)


def make(nodes: int = 4, gpus: int = 8, clock: list[float] | None = None) -> Ledger:
    now = clock if clock is not None else [1000.0]
    ledger = Ledger(clock=lambda: now[0])
    for i in range(nodes):
        ledger.upsert_node(node(f"n{i}", gpus, leaf=f"leaf-{i // 2}"))
    return ledger


def free(ledger: Ledger) -> dict[str, int]:
    return {name: sum(g["freeMilli"] == 1000 for g in n["gpus"]) for name, n in ledger.snapshot()["nodes"].items()}


def free_milli(ledger: Ledger) -> dict[str, list[int]]:
    """Per node, each GPU's free thousandths by index (a shared GPU shows what its share leaves)."""
    return {name: [g["freeMilli"] for g in sorted(n["gpus"], key=lambda g: g["index"])]
            for name, n in ledger.snapshot()["nodes"].items()}


def reserve(ledger: Ledger, job: str, pods: int, gpus: int = 8, ttl: float = 60) -> Placement:
    out = ledger.reserve(GangRequest(id=job, pods=pods, gpus_per_pod=gpus), None, ttl)
    assert isinstance(out.result, Placement), out.result
    return out.result


def test_plain_pod_filter_reasons_and_unknown_nodes() -> None:
    ledger = make(2)
    ledger.upsert_pod(pod("b", 8, node_name="n0"))
    verdict = ledger.filter(demand(2), ["n0", "n1", "cpu-only"])
    assert verdict.passed == ["n1"]
    assert "n0" in verdict.failed and "0" in verdict.failed["n0"]
    assert set(verdict.unresolvable) == {"cpu-only"}


def test_reserved_gpus_are_never_given_to_plain_pods() -> None:
    ledger = make(2)
    placement = reserve(ledger, "job-1", pods=1)
    reserved = placement.assignments[0].node
    verdict = ledger.filter(demand(1), ["n0", "n1"])
    assert reserved not in verdict.passed
    assert "8 reserved for gangs" in verdict.failed[reserved]
    other = ({"n0", "n1"} - {reserved}).pop()
    ledger.upsert_pod(pod("b", 8, node_name=other))
    assert "reserved" not in ledger.filter(demand(1), ["n0", "n1"]).failed[other]
    # The core's path (CPU demand) names reservations too.
    with_cpu = ledger._filter_core(ledger._current(), GangRequest(id="pod/c", gpus_per_pod=1, cpu_milli=100),
                                   ["n0", "n1"])
    assert "8 reserved for gangs" in with_cpu.failed[reserved]


def test_gang_pod_passes_only_its_planned_node() -> None:
    ledger = make(3)
    placement = reserve(ledger, "job-1", pods=2)
    target = placement.assignments[1].node
    gang_pod = demand(8, uid="g1", pinned_node=target, job_uid="job-1", pod_index=1)
    verdict = ledger.filter(gang_pod, ["n0", "n1", "n2"])
    assert verdict.passed == [target]
    assert set(verdict.unresolvable) == {"n0", "n1", "n2"} - {target}
    assert dict(ledger.prioritize(gang_pod, ["n0", "n1", "n2"]))[target] == 10


def test_pods_take_over_reservations_and_release_frees_only_unclaimed_slots() -> None:
    ledger = make(2)
    placement = reserve(ledger, "job-1", pods=2)
    a0 = placement.assignments[0]
    ledger.upsert_pod(pod("g0", 8, pinned=a0.node, gpu_idx=",".join(map(str, a0.gpus)), job="job-1", index=0))
    assert ledger.release("job-1") == 8  # pod 1 was still only reserved
    assert sum(free(ledger).values()) == 8


def test_restart_rebuilds_the_same_ledger_from_pods() -> None:
    ledger = make(4)
    placement = reserve(ledger, "job-1", pods=3)
    pods = [pod(f"g{a.pod}", 8, pinned=a.node, gpu_idx=",".join(map(str, a.gpus)), job="job-1", index=a.pod)
            for a in placement.assignments]
    pods.append(pod("plain", 2, node_name=next(n for n in ["n0", "n1", "n2", "n3"]
                                               if n not in placement.nodes)))
    for p in pods:
        ledger.upsert_pod(p)
    before = free(ledger)
    fresh = Ledger()
    fresh.replace_all([node(f"n{i}", 8, leaf=f"leaf-{i // 2}") for i in range(4)], {}, pods)
    assert free(fresh) == before
    assert fresh.snapshot()["pods"] == ledger.snapshot()["pods"]


def test_unclaimed_reservations_expire_but_created_pods_keep_their_gpus() -> None:
    clock = [1000.0]
    ledger = make(2, clock=clock)
    placement = reserve(ledger, "job-1", pods=2, ttl=30)
    a0 = placement.assignments[0]
    ledger.upsert_pod(pod("g0", 8, pinned=a0.node, gpu_idx=",".join(map(str, a0.gpus)), job="job-1", index=0))
    clock[0] = 1029.0
    assert ledger.expire() == []
    clock[0] = 1031.0
    assert ledger.expire() == ["job-1"]
    assert free(ledger) == {a0.node: 0, ({"n0", "n1"} - {a0.node}).pop(): 8}


def test_reserving_a_gang_whose_pods_exist_returns_their_placement() -> None:
    ledger = make(2)
    placement = reserve(ledger, "job-1", pods=2)
    for a in placement.assignments:
        ledger.upsert_pod(pod(f"g{a.pod}", 8, pinned=a.node, gpu_idx=",".join(map(str, a.gpus)), job="job-1",
                              index=a.pod))
    again = ledger.reserve(GangRequest(id="job-1", pods=2, gpus_per_pod=8), None, 60)
    assert isinstance(again.result, Placement)
    assert again.result.assignments == placement.assignments
    ledger.delete_pod("g1")
    partial = ledger.reserve(GangRequest(id="job-1", pods=2, gpus_per_pod=8), None, 60)
    assert not isinstance(partial.result, Placement)
    assert "delete the whole gang" in partial.result.reason


def test_deleted_and_finished_pods_free_their_gpus() -> None:
    ledger = make(1)
    ledger.upsert_pod(pod("a", 4, node_name="n0"))
    ledger.upsert_pod(pod("b", 4, node_name="n0"))
    assert free(ledger) == {"n0": 0}
    ledger.upsert_pod(pod("a", 4, node_name="n0", phase="Succeeded"))
    ledger.delete_pod("b")
    assert free(ledger) == {"n0": 8}


def test_exact_indices_win_over_guessed_ones() -> None:
    ledger = make(1)
    ledger.upsert_pod(pod("plain", 2, node_name="n0"))  # guessed GPUs 0,1
    ledger.upsert_pod(pod("g", 2, pinned="n0", gpu_idx="0,1", job="j", index=0, node_name="n0"))
    snap = ledger.snapshot()
    assert snap["unplaced"] == {}
    holders = {g["index"]: g["holders"] for g in snap["nodes"]["n0"]["gpus"]}
    assert holders[0] == ["j#0"] and holders[1] == ["j#0"]
    assert sum(1 for h in holders.values() if h == ["pod/plain#0"]) == 2


def test_preempt_keeps_whole_gangs_only_and_only_when_the_pod_then_fits() -> None:
    ledger = make(2)
    for i, n in enumerate(["n0", "n1"]):
        ledger.upsert_pod(pod(f"g{i}", 4, node_name=n, job="gang", index=i))
    ledger.upsert_pod(pod("solo", 4, node_name="n0"))
    ledger.upsert_pod(pod("small", 2, node_name="n1"))
    preemptor = demand(8, uid="hi")
    kept = ledger.preempt(preemptor, {"n0": ["g0", "solo"], "n1": ["small"]})
    assert kept == {}  # n0 breaks the gang; n1 does not free enough
    kept = ledger.preempt(demand(4, uid="hi"), {"n0": ["solo"], "n1": ["small", "g1"]})
    assert kept == {"n0": ["solo"]}


def test_what_if_returns_the_smallest_victim_set() -> None:
    ledger = make(2)
    ledger.upsert_pod(pod("a", 2, node_name="n0", job="small", index=0))
    ledger.upsert_pod(pod("b", 8, node_name="n1", job="big", index=0))
    gang = GangRequest(id="new", pods=1, gpus_per_pod=8)
    out = ledger.what_if(gang, ["small", "big"])
    assert isinstance(out.result, Placement)
    assert out.victims == ("small",)
    out = ledger.what_if(GangRequest(id="new", pods=2, gpus_per_pod=8), ["small", "big"])
    assert out.victims == ("small", "big")
    assert ledger.what_if(GangRequest(id="x", pods=3, gpus_per_pod=8), ["small", "big"]).victims == ()
    assert free(ledger) == {"n0": 6, "n1": 0}  # WhatIf changed nothing


def test_what_if_prefers_earlier_candidates_and_frees_whole_gangs_only() -> None:
    ledger = make(4)
    for job, n in (("a", "n0"), ("b", "n1")):
        ledger.upsert_pod(pod(f"{job}-0", 8, node_name=n, job=job, index=0))
    reserve(ledger, "r", pods=2)  # n2, n3: reserved, no pods yet
    gang = GangRequest(id="new", pods=1, gpus_per_pod=8)
    # Either of two equally costly gangs suffices: the earlier in the caller's list goes.
    assert ledger.what_if(gang, ["b", "a"]).victims == ("b",)
    assert ledger.what_if(gang, ["a", "b"]).victims == ("a",)
    # Fewest GPUs evicted comes first, then the caller's order.
    assert ledger.what_if(gang, ["r", "a"]).victims == ("a",)
    # A candidate's reserved slots go with it (the whole gang); victims come in the caller's order.
    assert ledger.what_if(replace(gang, pods=2), ["r", "a"]).victims == ("r",)
    out = ledger.what_if(replace(gang, pods=4), ["b", "r", "a"])
    assert out.victims == ("b", "r", "a") and isinstance(out.result, Placement)
    # Nothing listed holds anything (unknown, the gang itself): not placeable, no victims.
    out = ledger.what_if(GangRequest(id="r", pods=3, gpus_per_pod=8), ["r", "nobody"])
    assert out.victims == () and not isinstance(out.result, Placement)
    assert free(ledger) == {"n0": 0, "n1": 0, "n2": 0, "n3": 0}  # WhatIf changed nothing


def test_what_if_does_not_count_the_gangs_own_reservation_against_it() -> None:
    ledger = make(2)
    reserve(ledger, "new", pods=1)
    ledger.upsert_pod(pod("a-0", 8, node_name=free_node(ledger), job="a", index=0))
    out = ledger.what_if(GangRequest(id="new", pods=2, gpus_per_pod=8), ["a"])
    assert out.victims == ("a",) and isinstance(out.result, Placement)
    out = ledger.what_if(GangRequest(id="new", pods=1, gpus_per_pod=8), ["a"])
    assert out.victims == () and isinstance(out.result, Placement)


def free_node(ledger: Ledger) -> str:
    return next(name for name, count in free(ledger).items() if count == 8)


_jobs = st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8]), st.booleans()), min_size=3, max_size=12)


@settings(max_examples=40, deadline=None)
@given(jobs=_jobs, pods=st.integers(1, 5), gpus=st.sampled_from([2, 4, 8]),
       required=st.sampled_from([None, Level.LEAF]), own=st.booleans(), order=st.randoms(use_true_random=False))
def test_what_if_agrees_with_plan_preemption(jobs: list[tuple[int, int, bool]], pods: int, gpus: int,
                                             required: Level | None, own: bool, order: random.Random) -> None:
    """The extender's WhatIf is the core's planner: same victims, same placement, on a random cluster
    (bound gangs and reserved ones, the gang's own reservation, unknown and repeated candidates)."""
    from kubegang.placement import Unplaceable
    from kubegang.preemption import Candidate, plan_preemption

    ledger = make(6)
    gang = GangRequest(id="new", pods=pods, gpus_per_pod=gpus, required_level=required)
    if own:
        ledger.reserve(replace(gang, pods=1), None, 60)
    for k, (size, per_pod, bound) in enumerate(jobs):
        job = GangRequest(id=f"job-{k}", pods=size, gpus_per_pod=per_pod)
        if not bound:
            ledger.reserve(job, None, 60)
            continue
        result = ledger.plan(job)
        if isinstance(result, Placement):
            for a in result.assignments:
                ledger.upsert_pod(pod(f"{job.id}-{a.pod}", per_pod, node_name=a.node, pinned=a.node,
                                      gpu_idx=",".join(map(str, a.gpus)), job=job.id, index=a.pod))
    candidates = [f"job-{k}" for k in range(len(jobs))] + ["nobody", "new"]
    order.shuffle(candidates)
    candidates += candidates[:2]  # offered twice: the first place counts
    before = ledger.snapshot()
    out = ledger.what_if(gang, candidates)
    assert ledger.snapshot() == before, "WhatIf must change nothing"

    expected = ledger._current().clone()
    expected.release("new")  # its own reservation (it has no pods)
    ranked = [Candidate(uid, priority=i) for i, uid in enumerate(dict.fromkeys(candidates))]
    found = plan_preemption(gang, expected, ranked)
    if found is None:
        assert out.victims == () and isinstance(out.result, Unplaceable)
        return
    assert set(out.victims) == set(found.victims)
    assert list(out.victims) == [uid for uid in dict.fromkeys(candidates) if uid in found.victims]
    assert out.result == found.placement


def test_plan_changes_nothing_and_respects_required_level() -> None:
    ledger = make(4)
    result = ledger.plan(GangRequest(id="j", pods=2, gpus_per_pod=8, required_level=Level.LEAF))
    assert isinstance(result, Placement)
    assert result.level <= Level.LEAF
    assert sum(free(ledger).values()) == 32


def test_gpunode_health_removes_a_gpu() -> None:
    ledger = make(1)
    status = GPUNodeStatus.model_validate(
        {"gpus": [{"index": 0, "product": "NVIDIA H100", "health": {"healthy": False, "reasons": ["xid 79"]}}]})
    ledger.upsert_gpunode("n0", status)
    assert free(ledger) == {"n0": 7}
    assert not ledger.filter(demand(8), ["n0"]).passed


ops = st.lists(
    st.tuples(st.sampled_from(["reserve", "claim", "plain", "delete", "expire", "release"]),
              st.integers(0, 5), st.integers(1, 3)),
    max_size=30,
)


def apply_op(ledger: Ledger, pods: dict[str, dict[str, Any]], op: str, k: int, size: int, now: float) -> None:
    """One step of a random history (the property tests'): ``pods`` are the live pods, kept current."""
    job = f"job-{k}"
    if op == "reserve":
        ledger.reserve(GangRequest(id=job, pods=size, gpus_per_pod=4), None, 25)
    elif op == "claim":
        for r_job, r in ledger.snapshot()["reservations"].items():
            for a in r["placement"]:
                if a["pod"] not in r["heldPods"]:
                    continue
                uid = f"{r_job}-{a['pod']}"
                pods[uid] = pod(uid, 4, pinned=a["node"], gpu_idx=",".join(map(str, a["gpus"])),
                                job=r_job, index=a["pod"])
                ledger.upsert_pod(pods[uid])
            break
    elif op == "plain":
        passed = ledger.filter(demand(size, uid=f"plain-{k}-{now}"), ["n0", "n1", "n2", "n3"]).passed
        if passed:
            uid = f"plain-{k}-{now}"
            pods[uid] = pod(uid, size, node_name=passed[0])
            ledger.upsert_pod(pods[uid])
    elif op in ("bind", "run", "finish") and pods:
        uid = sorted(pods)[k % len(pods)]
        obj = pods[uid]
        on = obj["metadata"]["annotations"].get("kubegang.io/node") or obj["spec"]["nodeName"]
        pods[uid] = {**obj, "spec": {**obj["spec"], "nodeName": on},
                     "status": {"phase": {"bind": "Pending", "run": "Running", "finish": "Succeeded"}[op]}}
        ledger.upsert_pod(pods[uid])
    elif op == "delete" and pods:
        uid = sorted(pods)[k % len(pods)]
        del pods[uid]
        ledger.delete_pod(uid)
    elif op == "expire":
        ledger.expire()
    elif op == "release":
        ledger.release(job)
    elif op in ("cordon", "uncordon"):
        body = node(f"n{k % 4}", 8, leaf=f"leaf-{k % 4 // 2}")
        ledger.upsert_node({**body, "spec": {"unschedulable": True}} if op == "cordon" else body)


@settings(max_examples=60, deadline=None)
@given(ops=ops)
def test_no_gpu_is_ever_held_twice_and_a_restart_agrees(ops: list[tuple[str, int, int]]) -> None:
    clock = [0.0]
    ledger = make(4, clock=clock)
    pods: dict[str, dict[str, Any]] = {}
    for op, k, size in ops:
        clock[0] += 10
        apply_op(ledger, pods, op, k, size, clock[0])
        snap = ledger.snapshot()
        assert snap["unplaced"] == {}
        for n in snap["nodes"].values():
            for g in n["gpus"]:
                assert len(g["holders"]) <= 1, g
                assert (g["freeMilli"] == 1000) == (not g["holders"])
    if not ledger.snapshot()["reservations"]:
        fresh = Ledger()
        fresh.replace_all([node(f"n{i}", 8, leaf=f"leaf-{i // 2}") for i in range(4)], {}, list(pods.values()))
        assert free(fresh) == free(ledger)


@settings(max_examples=40, deadline=None)
@given(load=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8)), max_size=20),
       need=st.integers(1, 8), cordon=st.integers(0, 5), taint=st.integers(0, 5))
def test_fast_filter_agrees_with_the_core(load: list[tuple[int, int]], need: int, cordon: int, taint: int) -> None:
    from kubegang.placement import feasible_nodes

    ledger = make(6)
    cordoned = node(f"n{cordon}", 8, leaf=f"leaf-{cordon // 2}")
    cordoned["spec"]["unschedulable"] = True
    ledger.upsert_node(cordoned)
    tainted = node(f"n{taint}", 8, leaf=f"leaf-{taint // 2}")
    tainted["spec"]["taints"] = [{"key": "gpu", "effect": "NoSchedule"}]
    ledger.upsert_node(tainted)
    for i, (n, gpus) in enumerate(load):
        ledger.upsert_pod(pod(f"p{i}", gpus, node_name=f"n{n}"))
    names = [f"n{i}" for i in range(7)]
    verdict = ledger.filter(demand(need), names)
    ok, failed = feasible_nodes(GangRequest(id="pod/x", pods=1, gpus_per_pod=need), ledger._current(), names)
    assert verdict.passed == ok
    assert {**verdict.failed, **verdict.unresolvable} == failed


def test_waiting_gpu_pods_are_requeued_once_when_reserved_gpus_are_freed_quietly() -> None:
    clock = [1000.0]
    ledger = make(2, clock=clock)
    other = ({"n0", "n1"} - {reserve(ledger, "job-1", pods=1).assignments[0].node}).pop()
    ledger.upsert_pod(pod("w1", 1))                       # plain GPU pod, waiting for a node
    ledger.upsert_pod(pod("cpu", 0))                      # no GPUs: kube-scheduler never asks us
    ledger.upsert_pod(pod("g0", 8, pinned=other, job="job-2", index=0))   # planned: not ours to nudge
    ledger.upsert_pod(pod("w2", 2))
    ledger.upsert_pod(pod("done", 1, phase="Succeeded"))
    assert ledger.take_requeue(10) == []                  # nothing freed yet
    assert ledger.release("job-1") == 8
    assert ledger.take_requeue(1) == [("ns", "p-w1")]     # oldest first, bounded
    assert ledger.take_requeue(10) == []                  # once per freeing
    ledger.upsert_pod(pod("w1", 1, node_name=other))      # bound: no longer waiting
    ledger.delete_pod("w2")
    reserve(ledger, "job-3", pods=1, gpus=4, ttl=5)
    ledger.upsert_pod(pod("w3", 1))
    clock[0] += 10
    assert ledger.expire() == ["job-3"]
    assert ledger.take_requeue(10) == [("ns", "p-w3")]
    # A relist knows the waiting pods too.
    assert ledger.filter(demand(1), ["n0", "n1"]).passed  # nothing was double-booked on the way
    restarted = make(1, clock=clock)
    restarted.replace_all([node("n0")], {}, [pod("w4", 1)])
    reserve(restarted, "job-4", pods=1)
    restarted.release("job-4")
    assert restarted.take_requeue(10) == [("ns", "p-w4")]


def test_a_bound_pod_takes_its_gpus_from_a_reservation_and_pods_that_did_not_fit_are_placed_later() -> None:
    ledger = make(1)
    reserve(ledger, "job-1", pods=1)
    ledger.upsert_pod(pod("late", 8, node_name="n0"))    # bound by someone else: the API wins
    assert not ledger.snapshot()["unplaced"] and ledger.reservation_count == 0
    assert free(ledger) == {"n0": 0}
    ledger.upsert_pod(pod("later", 8, node_name="n0"))   # over-committed by another scheduler
    assert list(ledger.snapshot()["unplaced"]) == ["later"]
    ledger.delete_pod("late")
    assert not ledger.snapshot()["unplaced"]
    assert free(ledger) == {"n0": 0}


def gpujob(uid: str, placement: Placement | None, *, attempt: str = "2026-12-01T10:00:00Z",
           phase: str = "Admitted", replicas: int | None = None, cpu: str = "1") -> dict[str, Any]:
    """A GPUJob as the operator leaves it: admitted (``admittedAt`` + ``placement``) or given back."""
    status: dict[str, Any] = {"phase": phase}
    if placement is not None:
        status |= {"admittedAt": attempt, "placement": {
            "level": placement.level.label, "domain": placement.domain,
            "pods": [{"index": a.pod, "node": a.node, "gpus": list(a.gpus)} for a in placement.assignments]}}
    return {
        "metadata": {"name": f"job-{uid}", "namespace": "ns", "uid": uid},
        "spec": {"replicas": replicas or (len(placement.assignments) if placement else 1), "queue": "q",
                 "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {
                     "requests": {"cpu": cpu}, "limits": {"nvidia.com/gpu": "8"}}}]}}},
        "status": status,
    }


def _created(a: Any, job: str = "job-1", uid: str = "") -> dict[str, Any]:
    return pod(uid or f"{job}-{a.pod}", 8, pinned=a.node, gpu_idx=",".join(map(str, a.gpus)), job=job, index=a.pod)


def test_after_a_restart_an_admitted_jobs_recorded_placement_holds_the_gpus_of_its_missing_pods() -> None:
    first = make(3)
    placement = reserve(first, "job-1", pods=2)
    a0, a1 = placement.assignments
    # The extender restarts after pod 0 was created: the job's status still records both slots.
    ledger = Ledger()
    ledger.replace_all([node(f"n{i}", 8, leaf=f"leaf-{i // 2}") for i in range(3)], {}, [_created(a0)],
                       [gpujob("job-1", placement)])
    ledger.synced = True
    third = ({"n0", "n1", "n2"} - {a0.node, a1.node}).pop()
    assert ledger.filter(demand(8), ["n0", "n1", "n2"]).passed == [third]   # no grace: only pod 1's GPUs held
    assert ledger.snapshot()["reservations"]["job-1"] == {
        "expiresAt": None, "durable": True, "heldPods": [1], "pendingPods": [],
        "placement": [{"pod": a.pod, "node": a.node, "gpus": list(a.gpus)} for a in (a0, a1)]}
    assert ledger.expire(now=1e12) == []                                    # durable: no TTL
    again = ledger.reserve(GangRequest(id="job-1", pods=2, gpus_per_pod=8), None, 60)
    assert isinstance(again.result, Placement) and again.result.assignments == placement.assignments
    ledger.upsert_pod(_created(a1))
    assert ledger.reservation_count == 0                                    # both pods hold their GPUs
    # Pod 1 finishing does not make the record hold its slot again (same admission, seen before).
    ledger.upsert_gpujob(gpujob("job-1", placement))
    ledger.delete_pod("job-1-1")
    ledger.upsert_gpujob(gpujob("job-1", placement))
    assert ledger.reservation_count == 0 and a1.node in ledger.filter(demand(8), [a1.node]).passed


def test_a_reservation_becomes_durable_once_the_status_records_it_and_ends_when_the_job_gives_it_back() -> None:
    clock = [1000.0]
    ledger = make(2, clock=clock)
    placement = reserve(ledger, "job-1", pods=1, ttl=30)
    other = ({"n0", "n1"} - {placement.assignments[0].node}).pop()
    ledger.upsert_pod(pod("waiting", 8))
    ledger.upsert_gpujob(gpujob("job-1", None, phase="Queued"))          # not admitted yet: the TTL holds
    ledger.upsert_gpujob(gpujob("job-1", placement))                     # recorded: no TTL any more
    clock[0] += 3600
    assert ledger.expire() == [] and ledger.reservation_count == 1
    ledger.upsert_pod(pod("plain", 8, node_name=other))
    assert ledger.filter(demand(8), ["n0", "n1"]).passed == []
    ledger.upsert_gpujob(gpujob("job-1", None, phase="Queued"))          # given back (requeue, preemption)
    assert ledger.reservation_count == 0
    assert ledger.take_requeue(10) == [("ns", "p-waiting")]             # its GPUs were freed quietly
    # A TTL reservation whose status records something else stays a TTL reservation.
    mine = reserve(ledger, "job-2", pods=1, ttl=30)
    moved = replace(mine, assignments=(replace(mine.assignments[0], gpus=(9,)),))
    ledger.upsert_gpujob(gpujob("job-2", moved))
    clock[0] += 31
    assert ledger.expire() == ["job-2"]


def test_a_released_admission_is_not_held_again_by_its_late_events_and_a_new_attempt_is() -> None:
    ledger = make(2)
    placement = reserve(ledger, "job-1", pods=1)
    ledger.upsert_gpujob(gpujob("job-1", placement))
    ledger.release("job-1")                       # the operator tore the gang down; its status write lags
    ledger.upsert_gpujob(gpujob("job-1", placement))
    assert ledger.reservation_count == 0
    # The gang is admitted again elsewhere (a new admittedAt): an extender that missed the Reserve
    # (it restarted in between) still holds what the status records.
    ledger.upsert_gpujob(gpujob("job-1", placement, attempt="2026-12-01T11:00:00Z"))
    assert ledger.reservation_count == 1
    ledger.delete_gpujob("job-1")
    assert ledger.reservation_count == 0


def test_a_recorded_slot_a_bound_pod_took_while_the_extender_was_away_is_displaced_for_repair() -> None:
    first = make(2)
    placement = reserve(first, "job-1", pods=2)
    a0, a1 = placement.assignments
    ledger = Ledger()
    ledger.replace_all([node("n0"), node("n1")], {}, [_created(a0), pod("intruder", 8, node_name=a1.node,
                                                                         gpu_idx="0,1,2,3,4,5,6,7")],
                       [gpujob("job-1", placement)])
    assert ledger.reservation_count == 0 and not ledger.snapshot()["unplaced"]
    out = ledger.repair(GangRequest(id="job-1", pods=2, gpus_per_pod=8), 60)
    assert [(d.index, d.node, d.intruder) for d in out.displaced] == [(1, a1.node, "ns/p-intruder")]


def test_a_recorded_placement_the_ledger_cannot_read_holds_nothing_and_stops_nothing() -> None:
    ledger = make(1)
    placement = reserve(make(1), "job-1", pods=1)
    bad = gpujob("job-1", placement)
    bad["status"]["placement"]["level"] = "galaxy"
    ledger.upsert_gpujob(bad)
    ledger.upsert_gpujob({"metadata": {}, "status": {"admittedAt": "x"}})
    finished = gpujob("job-2", placement, phase="Succeeded")
    ledger.upsert_gpujob(finished)
    assert ledger.reservation_count == 0 and ledger.filter(demand(8), ["n0"]).passed == ["n0"]


def _shared_pod(uid: str, node_name: str, gpu: int, milli: int, job: str) -> dict[str, Any]:
    body = pod(uid, 0, node_name=node_name, pinned=node_name, gpu_idx=str(gpu), job=job, index=0)
    body["metadata"]["annotations"]["kubegang.io/gpu-milli"] = str(milli)
    body["spec"]["containers"][0]["resources"] = {}
    return body


def test_a_shared_gpu_pod_holds_its_share_and_whole_gpu_pods_never_land_on_that_gpu() -> None:
    ledger = make(1)
    out = ledger.reserve(GangRequest(id="job-s", pods=1, gpus_per_pod=0, gpu_fraction_milli=250), None, 60)
    assert isinstance(out.result, Placement), out.result
    (a,) = out.result.assignments
    assert a.gpu_milli == 250 and len(a.gpus) == 1
    ledger.upsert_pod(_shared_pod("s0", a.node, a.gpus[0], 250, "job-s"))
    assert ledger.reservation_count == 0  # the pod took over its reservation
    assert free(ledger)["n0"] == 7
    # A whole-GPU pod asking for all 8 does not fit: one GPU is partly shared.
    assert ledger.filter(demand(8), ["n0"]).passed == []
    assert ledger.filter(demand(7), ["n0"]).passed == ["n0"]
    # The pinned shared pod passes its node; a restart rebuilds the same hold from the pod alone.
    shared = ledger.filter(demand(0, uid="s0", pinned_node=a.node, pinned_gpus=a.gpus, gpu_milli=250,
                                  job_uid="job-s", pod_index=0), ["n0"])
    assert shared.passed == ["n0"]
    again = make(1)
    again.upsert_pod(_shared_pod("s0", a.node, a.gpus[0], 250, "job-s"))
    # Per GPU, in thousandths: counting only whole free GPUs would not tell a rebuild that charged the
    # whole GPU (0 left) from one that charged the share (750 left).
    assert free_milli(again) == free_milli(ledger)
    assert free_milli(again)["n0"][a.gpus[0]] == 750
    assert sorted(free_milli(again)["n0"]) == [750] + [1000] * 7
    ledger.delete_pod("s0")
    assert free(ledger)["n0"] == 8


def test_gpu_totals_count_a_shared_gpu_once() -> None:
    """The dashboard's "GPUs in the ledger" adds bound, reserved and free: two pods sharing one GPU
    made a node of 8 read 9."""
    ledger = make(1)
    ledger.upsert_pod(_shared_pod("s0", "n0", 0, 500, "job-a"))
    ledger.upsert_pod(_shared_pod("s1", "n0", 0, 500, "job-b"))
    ledger.upsert_pod(_shared_pod("s2", "n0", 1, 250, "job-c"))
    (totals,) = ledger.gpu_totals().values()
    assert totals == {"bound": 2, "reserved": 0, "free": 6}


def test_a_share_annotation_without_a_planned_gpu_is_refused_with_the_annotation_named() -> None:
    body = pod("s1", 0, pinned="n0", job="j", index=0)
    body["metadata"]["annotations"]["kubegang.io/gpu-milli"] = "250"
    with pytest.raises(DemandError, match=r"kubegang\.io/gpu-milli"):
        pod_demand(Pod.model_validate(body))


def test_a_pod_bound_onto_reserved_gpus_displaces_that_slot_and_repair_places_it_near_the_rest() -> None:
    ledger = make(4)  # leaves: n0,n1 | n2,n3
    placement = reserve(ledger, "job-1", pods=2)
    slot1 = placement.assignments[1].node
    ledger.upsert_pod(pod("intruder", 8, node_name=slot1))  # another scheduler bound it there
    assert free(ledger)[slot1] == 0  # the bound pod holds the node: reality wins over the plan
    assert ledger.take_intrusions() == 1 and ledger.take_intrusions() == 0
    gang = GangRequest(id="job-1", pods=2, gpus_per_pod=8)
    out = ledger.repair(gang, 60)
    assert isinstance(out.result, Placement)
    assert [(d.index, d.node, d.intruder) for d in out.displaced] == [(1, slot1, "ns/p-intruder")]
    moved = out.result.assignments[1].node
    assert moved not in (slot1, placement.assignments[0].node)
    assert out.result.assignments[0] == placement.assignments[0]
    assert free(ledger)[moved] == 0  # held for the gang again
    again = ledger.repair(gang, 60)
    assert again.displaced == () and again.result == out.result


def test_an_unbound_gang_pod_whose_gpus_an_intruder_took_is_displaced_and_its_replacement_claims_the_repair() -> None:
    ledger = make(4)
    placement = reserve(ledger, "job-1", pods=2)
    for a in placement.assignments:
        ledger.upsert_pod(pod(f"g{a.pod}", 8, pinned=a.node, gpu_idx=",".join(map(str, a.gpus)), job="job-1",
                              index=a.pod))
    slot1 = placement.assignments[1].node
    ledger.upsert_pod(pod("intruder", 8, node_name=slot1))
    assert free(ledger)[slot1] == 0
    out = ledger.repair(GangRequest(id="job-1", pods=2, gpus_per_pod=8), 60)
    assert isinstance(out.result, Placement) and [d.index for d in out.displaced] == [1]
    new = out.result.assignments[1]
    ledger.delete_pod("g1")
    ledger.upsert_pod(pod("g1b", 8, pinned=new.node, gpu_idx=",".join(map(str, new.gpus)), job="job-1", index=1))
    assert ledger.reservation_count == 0  # the new pod took over the repaired slot
    held = {h["pod"]: h["node"] for h in ledger.snapshot()["pods"].values()}
    assert held == {"ns/p-g0": placement.assignments[0].node, "ns/p-g1b": new.node, "ns/p-intruder": slot1}


def test_repair_says_so_when_the_displaced_slot_fits_nowhere() -> None:
    ledger = make(2)
    reserve(ledger, "job-1", pods=2)
    ledger.upsert_pod(pod("intruder", 8, node_name="n1"))
    out = ledger.repair(GangRequest(id="job-1", pods=2, gpus_per_pod=8), 60)
    assert not isinstance(out.result, Placement) and [d.intruder for d in out.displaced] == ["ns/p-intruder"]


def test_an_admitted_record_the_ledger_cannot_read_is_that_jobs_problem_and_the_restart_goes_on() -> None:
    # Another client wrote the record without `gpus` (the schema allows it), or a CPU beyond any resource.
    placement = reserve(make(3), "job-1", pods=1)
    no_gpus = gpujob("job-1", placement)
    for slot in no_gpus["status"]["placement"]["pods"]:
        del slot["gpus"]
    huge = gpujob("job-2", placement, cpu="1e999999999")
    ledger = Ledger()
    ledger.replace_all([node(f"n{i}", 8, leaf=f"leaf-{i // 2}") for i in range(3)], {}, [], [no_gpus, huge])
    ledger.synced = True
    assert ledger.reservation_count == 0                      # neither record is held ...
    assert len(ledger.filter(demand(8), ["n0", "n1", "n2"]).passed) == 3   # ... and every node is read


def test_a_bound_pod_whose_gpu_annotation_cannot_be_read_still_holds_its_gpus() -> None:
    for notes in ({"kubegang.io/gpus": "0-7"}, {"kubegang.io/gpu-milli": "half"}):
        ledger = make(1)
        bound = pod("w", 8, node_name="n0", pinned="n0")
        bound["metadata"]["annotations"].update(notes)
        ledger.upsert_pod(bound)
        assert free(ledger) == {"n0": 0}, notes                  # its 8 GPUs are not free for anyone else
        assert ledger.filter(demand(8), ["n0"]).passed == [], notes


def test_a_node_claiming_more_gpus_than_any_server_has_is_left_out_at_once() -> None:
    ledger = Ledger()
    bogus = node("n-bogus", 8)
    bogus["status"]["allocatable"]["nvidia.com/gpu"] = "1000000"
    ledger.upsert_node(bogus)
    ledger.upsert_node(node("n0", 8))
    assert free(ledger) == {"n0": 8}
    assert ledger.filter(demand(8), ["n-bogus", "n0"]).passed == ["n0"]


def test_the_intrusion_metric_counts_each_displacement_once_across_refreshes() -> None:
    from kubegang.extender._metrics import ExtenderMetrics
    from kubegang.extender._runtime import publish

    ledger, metrics = make(4), ExtenderMetrics()
    placement = reserve(ledger, "job-1", pods=2)
    ledger.upsert_pod(pod("intruder", 8, node_name=placement.assignments[1].node))
    for _ in range(3):
        publish(ledger, metrics)  # the housekeeping refresh
    assert metrics.registry.get_sample_value("kubegang_extender_intrusions_total") == 1
