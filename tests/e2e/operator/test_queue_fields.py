"""GPUQueue fields and status as docs/api.md documents them, each on the real control plane.

One test per promise: borrowing and lending limits, the three preemption policies, weights (fair
share), namespaces, a queue's default priority and a job's priority over its class, the queue status
fields, examples/gpuqueue-tree.yaml's own promise, and a parent cycle. Amounts are picked so the
quota tree (docs/quota.md) gives exactly one answer; superpod-h100 has GPUs to spare for all of them,
so quota, never placement, is what each job waits for.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from kubegang.shapes import load_shape

from .conftest import H100, Ops

REPO = Path(__file__).resolve().parents[3]
TREE_EXAMPLE = REPO / "examples" / "gpuqueue-tree.yaml"
H200_SHAPE = REPO / "hack" / "shapes" / "demo-h200.yaml"
H200 = "NVIDIA-H200"
QUOTA = "QuotaExhausted"
SETTLE = 8.0
"""Seconds a decision that must *not* happen is given to happen anyway: more than the operator's
5 s resync, so several cycles have looked at the waiting job."""


# -- helpers --------------------------------------------------------------------------------------
def _wait_reason(ops: Ops, job: str, phase: str, reason: str, timeout: float = 60) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        nonlocal seen
        seen = ops.status(job)
        return seen.get("phase") == phase and seen.get("reason") == reason

    try:
        ops.cluster.wait_for(f"GPUJob {job} to be {phase} ({reason})", reached, timeout=timeout, interval=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last status: {json.dumps(seen)[:1500]}") from None
    return seen


def _preempted(ops: Ops, job: str) -> bool:
    cond = ops.condition(job, "Preempted")
    return cond is not None and cond["status"] == "True"


def _message(ops: Ops, job: str, ctype: str) -> str:
    cond = ops.condition(job, ctype)
    assert cond is not None, f"GPUJob {job} has no {ctype} condition: {json.dumps(ops.status(job))[:1500]}"
    return str(cond["message"])


def _holds(ops: Ops, what: str, predicate: Callable[[], bool], seconds: float = SETTLE) -> None:
    """``predicate`` stays true for ``seconds`` (a decision the operator must not take)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), what
        time.sleep(1)


def _queue_status(ops: Ops, queue: str) -> dict[str, Any]:
    return dict(ops.cluster.get_json("gpuqueue", queue).get("status") or {})


def _wait_queue(ops: Ops, queue: str, expected: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    """Wait until the queue's status has every field of ``expected`` (written every 5 s at most)."""
    seen: dict[str, Any] = {}

    def matches() -> bool:
        nonlocal seen
        seen = _queue_status(ops, queue)
        return all(seen.get(k, [] if k == "borrowed" else None) == v for k, v in expected.items())

    try:
        ops.cluster.wait_for(f"GPUQueue {queue} status {expected}", matches, timeout=timeout, interval=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last status: {json.dumps(seen)[:1500]}") from None
    return seen


def _patch_queue(ops: Ops, queue: str, spec: dict[str, Any]) -> None:
    ops.cluster.kubectl("patch", "gpuqueue", queue, "--type", "merge", "-p", json.dumps({"spec": spec}))


def _running_all(ops: Ops, *jobs: str, timeout: float = 90) -> None:
    for job in jobs:
        ops.wait_phase(job, "Running", timeout=timeout)


@contextlib.contextmanager
def _other_namespace(ops: Ops, suffix: str) -> Iterator[str]:
    """A second namespace for the test (jobs of another team), deleted with its gangs at the end."""
    name = f"{ops.namespace}-{suffix}"[:63].rstrip("-")
    ops.cluster.kubectl("create", "namespace", name)
    ops.cluster.wait_for("default service account", lambda: ops.cluster.kubectl(
        "get", "serviceaccount", "default", "-n", name, check=False).returncode == 0)
    try:
        yield name
    finally:
        ops.cluster.kubectl("delete", "gpujobs", "--all", "-n", name, "--wait=false", check=False)
        with contextlib.suppress(AssertionError):
            ops.cluster.wait_for(f"pods of {name} to be gone", lambda: not ops.cluster.get_json(
                "pods", "-n", name)["items"], timeout=90, interval=1)
        ops.cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _job_in(ops: Ops, namespace: str, name: str, queue: str, replicas: int, gpus: int, **spec: Any) -> None:
    manifest = ops.job_manifest(name, queue, replicas, gpus, **spec)
    manifest["metadata"]["namespace"] = namespace
    ops.cluster.apply(manifest)


def _status_in(ops: Ops, namespace: str, name: str) -> dict[str, Any]:
    return dict(ops.cluster.get_json("gpujob", name, "-n", namespace).get("status") or {})


# -- 1. resources[].borrowingLimit ----------------------------------------------------------------
def test_borrowing_limit_caps_a_leaf_at_nominal_plus_limit_although_the_parent_has_more(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 64)])  # its own pool: 80 in the tree, far more than the leaf may take
    team = ops.queue("team", [{"flavor": H100, "nominal": 16, "borrowingLimit": 8}], parent=org)
    for i in range(3):
        ops.job(f"fill-{i}", team, 1, 8)
    _running_all(ops, "fill-0", "fill-1", "fill-2")
    ops.job("over", team, 1, 8)
    _wait_reason(ops, "over", "Queued", QUOTA)
    message = _message(ops, "over", "Queued")
    # The limit, not the parent's pool, is what refuses it: org still has 56 unused.
    assert "(borrowingLimit 8, 8 borrowed)" in message, message
    _wait_queue(ops, team, {"borrowed": [{"flavor": H100, "gpus": 8}], "usedGPUs": 24})
    assert ops.phase("over") == "Queued" and ops.pods("over") == []


# -- 2. resources[].lendingLimit ------------------------------------------------------------------
def test_lending_limit_caps_what_a_sibling_may_borrow_of_unused_quota(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 0)])
    lender = ops.queue("lender", [{"flavor": H100, "nominal": 16, "lendingLimit": 4}], parent=org)
    borrower = ops.queue("borrower", [(H100, 8)], parent=org)
    for i in range(3):
        ops.job(f"b-{i}", borrower, 1, 4)
    _running_all(ops, "b-0", "b-1", "b-2")  # its 8 and the 4 the lender lends
    ops.job("b-over", borrower, 1, 4)
    _wait_reason(ops, "b-over", "Queued", QUOTA)
    message = _message(ops, "b-over", "Queued")
    # The lender idles 16 GPUs, yet only 4 of them are in the tree's shared pool (8 + 4).
    assert "of the 12 shared in" in message, message
    _wait_queue(ops, borrower, {"borrowed": [{"flavor": H100, "gpus": 4}], "usedGPUs": 12})
    # The 12 it keeps are there for it at once: nobody has to be preempted for them.
    ops.job("own", lender, 3, 4)
    ops.wait_phase("own", "Running", timeout=60)
    assert not any(_preempted(ops, f"b-{i}") for i in range(3))
    assert ops.phase("b-over") == "Queued"


# -- 3. preemption.reclaimFromBorrowers -----------------------------------------------------------
def test_reclaim_from_borrowers_defaults_to_never_the_lender_waits(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 0)])
    team_a = ops.queue("team-a", [(H100, 16)], parent=org)
    team_b = ops.queue("team-b", [(H100, 16)], parent=org)  # no preemption: the default
    ops.job("a-big", team_a, 4, 8)  # 32: 16 of them team-b's
    ops.wait_phase("a-big", "Running", timeout=90)
    ops.job("b-job", team_b, 2, 8)
    _wait_reason(ops, "b-job", "Queued", QUOTA)
    assert (ops.cluster.get_json("gpuqueue", team_b)["spec"].get("preemption") or {}).get(
        "reclaimFromBorrowers", "Never") == "Never"
    _holds(ops, "a-big must keep running: team-b's policy does not reclaim",
           lambda: not _preempted(ops, "a-big") and ops.phase("a-big") == "Running")
    assert ops.phase("b-job") == "Queued" and len(ops.running_pods("a-big")) == 4


def test_reclaim_from_borrowers_lower_priority_evicts_only_lower_priority_borrowers(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 0)])
    team_a = ops.queue("team-a", [(H100, 0)], parent=org)  # everything it runs is borrowed from team-b
    team_b = ops.queue("team-b", [(H100, 32)], parent=org, preemption={"reclaimFromBorrowers": "LowerPriority"})
    ops.job("a-equal", team_a, 2, 8, priority=50)
    ops.wait_phase("a-equal", "Running", timeout=90)
    ops.job("a-low", team_a, 2, 8, priority=0)
    ops.wait_phase("a-low", "Running", timeout=90)
    ops.job("b-1", team_b, 2, 8, priority=50)
    ops.cluster.wait_for("a-low to be preempted", lambda: _preempted(ops, "a-low"), timeout=60)
    message = _message(ops, "a-low", "Preempted")
    assert f"{ops.namespace}/b-1" in message and "reclaim nominal quota" in message, message
    ops.wait_phase("b-1", "Running", timeout=90)
    assert not _preempted(ops, "a-equal")
    # team-b wants its other 16 back, but only a-equal holds them: same priority, so it is not evicted
    # (with Any it would be).
    ops.job("b-2", team_b, 2, 8, priority=50)
    _wait_reason(ops, "b-2", "Queued", QUOTA)
    _holds(ops, "a-equal (priority 50) must not be evicted by b-2 (priority 50)",
           lambda: not _preempted(ops, "a-equal") and ops.phase("a-equal") == "Running")
    assert ops.phase("b-2") == "Queued"


# -- 4. preemption.borrowWithinParent -------------------------------------------------------------
def test_borrow_within_parent_lets_a_borrowing_job_evict_lower_priority_borrowers_only(ops: Ops) -> None:
    # org's own 8 GPUs are the whole tree; both leaves own nothing, so every job borrows, and
    # reclaimFromBorrowers (which needs the preemptor's side within its quota) never applies.
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 8)])
    team_a = ops.queue("team-a", [(H100, 0)], parent=org)
    team_b = ops.queue("team-b", [(H100, 0)], parent=org, preemption={"reclaimFromBorrowers": "Any"})
    ops.job("a-high", team_a, 1, 4, priority=100)
    ops.job("a-low", team_a, 1, 4, priority=0)
    _running_all(ops, "a-high", "a-low")
    ops.job("b-1", team_b, 1, 4, priority=100)
    _wait_reason(ops, "b-1", "Queued", QUOTA)
    _holds(ops, "borrowWithinParent defaults to Never: a-low must keep running",
           lambda: not _preempted(ops, "a-low") and ops.phase("a-low") == "Running")

    _patch_queue(ops, team_b, {"preemption": {"borrowWithinParent": "LowerPriority"}})
    ops.cluster.wait_for("a-low to be preempted", lambda: _preempted(ops, "a-low"), timeout=60)
    message = _message(ops, "a-low", "Preempted")
    assert f"{ops.namespace}/b-1" in message and "running on borrowed quota" in message, message
    ops.wait_phase("b-1", "Running", timeout=90)
    # Lower priority only: a-high (equal to b-2's) stays although b-2 could only run without it.
    ops.job("b-2", team_b, 1, 4, priority=100)
    _wait_reason(ops, "b-2", "Queued", QUOTA)
    _holds(ops, "a-high (priority 100) must not be evicted by b-2 (priority 100)",
           lambda: not _preempted(ops, "a-high") and ops.phase("a-high") == "Running")


# -- 5. weight --------------------------------------------------------------------------------------
def test_weight_two_sibling_gets_twice_the_borrowed_gpus_when_both_want_more(ops: Ops) -> None:
    # The leaves own nothing: all 48 GPUs are org's, so every job borrows. "hold" takes them first,
    # then gives them back 8 at a time, and each 8 go to the head the fair-share order puts first.
    # Share = borrowed / 48 / weight, the head included: weight 2 ends at 32, weight 1 at 16 (equal
    # weights would end 24/24, whatever the tie-breaks).
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 48)])
    hold = ops.queue("hold", [(H100, 0)], parent=org)
    light = ops.queue("w1", [(H100, 0)], parent=org)
    heavy = ops.queue("w2", [(H100, 0)], parent=org, weight=2)
    holders = [f"hold-{i}" for i in range(6)]
    for name in holders:
        ops.job(name, hold, 1, 8)
    _running_all(ops, *holders)
    # The weight-1 queue's jobs are older: FIFO alone would serve it first.
    for i in range(6):
        ops.job(f"light-{i}", light, 1, 8)
    for i in range(6):
        ops.job(f"heavy-{i}", heavy, 1, 8)
    waiting = [f"light-{i}" for i in range(6)] + [f"heavy-{i}" for i in range(6)]
    for name in waiting:
        ops.wait_phase(name, "Queued", timeout=60)

    def admitted() -> dict[str, str]:
        return {j["metadata"]["name"]: j["spec"]["queue"] for j in ops.jobs()
                if j["metadata"]["name"] in waiting
                and (j.get("status") or {}).get("phase") in ("Admitted", "Running")}

    order: list[str] = []
    for step, name in enumerate(holders, start=1):
        before = admitted()
        ops.cluster.kubectl("delete", "gpujob", name, "-n", ops.namespace, "--wait=false")
        ops.cluster.wait_for(f"one more job admitted after {name} left", lambda n=step: len(admitted()) >= n,
                             timeout=30, interval=0.5)
        now = admitted()
        assert len(now) == step, now  # 8 GPUs freed: room for one job, no more
        order += [now[job] for job in set(now) - set(before)]
    assert order[0] == heavy, order  # 8/48/2 < 8/48: the heavier queue goes first from the start
    assert (order.count(light), order.count(heavy)) == (2, 4), order
    # status.fairShare is borrowed / 48 / weight: 16/48 and 32/48/2.
    status_light = _wait_queue(ops, light, {"usedGPUs": 16})
    status_heavy = _wait_queue(ops, heavy, {"usedGPUs": 32})
    assert isinstance(status_light["fairShare"], float | int) and isinstance(status_heavy["fairShare"], float | int)
    assert abs(status_light["fairShare"] - 1 / 3) < 1e-5, status_light
    assert abs(status_heavy["fairShare"] - 1 / 3) < 1e-5, status_heavy


# -- 6. namespaces ----------------------------------------------------------------------------------
def test_a_leaf_listing_namespaces_holds_jobs_of_other_namespaces_unschedulable(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("served", [(H100, 32)], namespaces=[ops.namespace])
    with _other_namespace(ops, "other") as other:
        ops.job("ours", q, 1, 8)
        _job_in(ops, other, "theirs", q, 1, 8)
        ops.wait_phase("ours", "Running", timeout=60)

        def refused() -> bool:
            return _status_in(ops, other, "theirs").get("phase") == "Unschedulable"

        ops.cluster.wait_for("theirs to be Unschedulable", refused, timeout=60, interval=1)
        status = _status_in(ops, other, "theirs")
        cond = next(c for c in status["conditions"] if c["type"] == "Unschedulable")
        assert (status["reason"], cond["reason"]) == ("NamespaceNotServed", "NamespaceNotServed"), status
        assert f"queue {q} does not serve namespace {other} (it serves: {ops.namespace})" in cond["message"], cond
        assert not ops.cluster.get_json("pods", "-n", other)["items"]
        # Listing the namespace is the fix docs/operator.md names: the job is then admitted.
        _patch_queue(ops, q, {"namespaces": [ops.namespace, other]})
        ops.cluster.wait_for("theirs to run once its namespace is listed",
                             lambda: _status_in(ops, other, "theirs").get("phase") == "Running", timeout=60)


# -- 7. priority on a queue, and a job's priority over its class ----------------------------------
def test_queue_priority_applies_to_jobs_that_set_no_priority(ops: Ops) -> None:
    # Preemption within the queue happens for a strictly higher priority only: the job without one
    # evicts the priority-10 gang only if it carries the queue's 100 (without it: 0).
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("prio", [(H100, 16)], priority=100, preemption={"withinQueue": "LowerPriority"})
    ops.job("low", q, 2, 8, priority=10)
    ops.wait_phase("low", "Running", timeout=90)
    ops.job("plain", q, 2, 8)
    ops.cluster.wait_for("low to be preempted", lambda: _preempted(ops, "low"), timeout=60)
    message = _message(ops, "low", "Preempted")
    assert f"{ops.namespace}/plain" in message and "higher priority" in message, message
    ops.wait_phase("plain", "Running", timeout=90)
    assert ops.phase("low") == "Queued"


def test_job_priority_overrides_its_priority_class_value(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    klass = f"{ops.namespace}-high"[:253]
    ops.cluster.kubectl("create", "priorityclass", klass, "--value=1000")
    try:
        q = ops.queue("override", [(H100, 16)], preemption={"withinQueue": "LowerPriority"})
        ops.job("classed-1", q, 2, 8, priorityClassName=klass, priority=1)
        ops.wait_phase("classed-1", "Running", timeout=90)
        # 50 beats the job's own 1, not its class's 1000.
        ops.job("mid", q, 2, 8, priority=50)
        ops.cluster.wait_for("classed-1 to be preempted by mid", lambda: _preempted(ops, "classed-1"), timeout=60)
        ops.wait_phase("mid", "Running", timeout=90)
        # The class's value is known to the operator: a job of the class alone outranks mid.
        ops.job("classed", q, 2, 8, priorityClassName=klass)
        ops.cluster.wait_for("mid to be preempted by classed", lambda: _preempted(ops, "mid"), timeout=60)
        ops.wait_phase("classed", "Running", timeout=90)
        assert ops.phase("classed-1") == "Queued"
    finally:
        ops.cleanup()
        ops.cluster.kubectl("delete", "priorityclass", klass, "--ignore-not-found", check=False)


# -- 9. status fields -------------------------------------------------------------------------------
def test_queue_status_counts_usage_borrowing_jobs_and_share_and_follows_spec_edits(ops: Ops) -> None:
    # org 8 + leaf 8 = 16 in the tree. The leaf runs 8 + 4 (4 borrowed) and one 8-GPU job waits.
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 8)])
    leaf = ops.queue("leaf", [(H100, 8)], parent=org)
    ops.job("r-8", leaf, 1, 8)
    ops.job("r-4", leaf, 1, 4)
    _running_all(ops, "r-8", "r-4")
    ops.job("waits", leaf, 1, 8)
    _wait_reason(ops, "waits", "Queued", QUOTA)
    usage = [{"flavor": H100, "gpus": 12}]
    leaf_status = _wait_queue(ops, leaf, {
        "usage": usage, "borrowed": [{"flavor": H100, "gpus": 4}], "usedGPUs": 12, "pending": 1, "admitted": 2,
    })
    assert leaf_status["fairShare"] == 0.25, leaf_status  # 4 borrowed / 16 the tree reaches / weight 1
    # A parent counts its subtree; a root borrows from nobody.
    org_status = _wait_queue(ops, org, {"usage": usage, "usedGPUs": 12, "pending": 1, "admitted": 2})
    assert org_status.get("borrowed", []) == [] and org_status["fairShare"] == 0, org_status
    # In a valid tree every queue says so: Active, InQuotaTree, for the generation it describes.
    assert [(c["type"], c["status"], c["reason"], c["observedGeneration"]) for c in leaf_status["conditions"]] == [
        ("Active", "True", "InQuotaTree", 1)], leaf_status
    # A spec edit shows in the status: the share halves with weight 2, and the status says which
    # generation it describes.
    _patch_queue(ops, leaf, {"weight": 2})
    leaf_status = _wait_queue(ops, leaf, {"fairShare": 0.125})
    generation = ops.cluster.get_json("gpuqueue", leaf)["metadata"]["generation"]
    assert generation >= 2
    _wait_queue(ops, leaf, {"observedGeneration": generation}, timeout=15)


# -- 10. examples/gpuqueue-tree.yaml --------------------------------------------------------------
def _hack(ops: Ops, *args: str) -> None:
    assert ops.cluster.cluster_dir is not None, "the H200 nodes are added by hack/cluster: it needs its cluster"
    proc = subprocess.run([str(REPO / "hack" / "cluster"), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KUBEGANG_CLUSTER_DIR": str(ops.cluster.cluster_dir)})
    assert proc.returncode == 0, f"hack/cluster {' '.join(args)} failed: {proc.stderr[-3000:]}"


def test_tree_example_team_a_borrows_team_bs_24_and_is_preempted_when_team_b_wants_them(ops: Ops) -> None:
    # The example's queues as shipped, renamed with the test's prefix; its namespaces team-a and
    # team-b become the test's own and a second one; its H200s are hack/shapes/demo-h200.yaml's.
    ops.cluster.use_shape("superpod-h100")
    h200_nodes = [name for name, _ in load_shape(H200_SHAPE).nodes()]
    _hack(ops, "nodes", str(H200_SHAPE))
    try:
        with _other_namespace(ops, "team-b") as team_b_ns:
            names = {"team-a": ops.namespace, "team-b": team_b_ns}
            queues: dict[str, str] = {}
            for doc in (d for d in yaml.safe_load_all(TREE_EXAMPLE.read_text()) if d):
                original = doc["metadata"]["name"]
                spec = dict(doc["spec"])
                if "parent" in spec:
                    spec["parent"] = queues[spec["parent"]]
                spec["namespaces"] = [names[n] for n in spec.get("namespaces", [])]
                queues[original] = ops.queue(original, spec.pop("resources"), **spec)
            team_a, team_b = queues["h200-team-a"], queues["h200-team-b"]
            ops.job("a-own", team_a, 4, 8, gpuProduct=H200)  # its nominal 32
            ops.wait_phase("a-own", "Running", timeout=90)
            ops.job("a-borrow", team_a, 3, 8, gpuProduct=H200)  # the 24 team-b lends
            ops.wait_phase("a-borrow", "Running", timeout=90)
            _wait_queue(ops, team_a, {"borrowed": [{"flavor": H200, "gpus": 24}], "usedGPUs": 56})
            # "lends at most 24 of its 32 (it always keeps 8)": 8 more for team-a wait, with team-b's 8 idle.
            ops.job("a-more", team_a, 1, 8, gpuProduct=H200)
            ops.cluster.wait_for("a-more to wait for quota", lambda: (ops.condition("a-more", "Queued") or {}).get(
                "reason") == "QuotaExhausted", timeout=60, interval=1)
            assert ops.pods("a-more") == []

            uids = {name: ops.get(name)["metadata"]["uid"] for name in ("a-own", "a-borrow")}
            _job_in(ops, team_b_ns, "b-job", team_b, 4, 8, gpuProduct=H200)
            ops.cluster.wait_for("b-job to run", lambda: _status_in(ops, team_b_ns, "b-job").get(
                "phase") == "Running", timeout=90, interval=1)
            # Evicting either gang gives team-b its 32; docs/quota.md's victim order (the most recently
            # started first, least work lost) picks the borrowed one, and team-a keeps its nominal 32.
            evicted = {name for name in ("a-own", "a-borrow") if _preempted(ops, name)}
            assert evicted == {"a-borrow"}, f"team-b reclaimed its quota by preempting {sorted(evicted)}; uids {uids}"
            message = _message(ops, "a-borrow", "Preempted")
            assert f"{team_b_ns}/b-job" in message and "reclaim nominal quota" in message, message
            assert ops.phase("a-own") == "Running" and ops.phase("a-borrow") == "Queued"
    finally:
        ops.cleanup()
        ops.cluster.kubectl("delete", "nodes", *h200_nodes, "--ignore-not-found", "--wait=true", check=False,
                            timeout=300)


# -- 8. parent cycle --------------------------------------------------------------------------------
def test_two_queues_naming_each_other_as_parents_are_left_out_and_the_rest_of_the_tree_admits(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    first, second = f"{ops.namespace}-cycle-a", f"{ops.namespace}-cycle-b"
    ops.queue("cycle-a", [(H100, 8)], parent=second)
    ops.queue("cycle-b", [(H100, 8)], parent=first)
    under = ops.queue("under-cycle", [(H100, 8)], parent=first)
    ops.job("in-cycle", under, 1, 8)
    # A parent not created yet (the order a `kubectl apply -f dir/` may take): left out until it exists.
    missing = f"{ops.namespace}-later"
    orphan = ops.queue("orphan", [(H100, 8)], parent=missing)
    ops.job("orphaned", orphan, 1, 8)

    def active(queue: str) -> dict[str, Any]:
        return next((c for c in _queue_status(ops, queue).get("conditions") or [] if c.get("type") == "Active"), {})

    def reported() -> bool:
        return (all((active(q).get("status"), active(q).get("reason")) == ("False", "ParentCycle")
                    for q in (first, second))
                and (active(under).get("status"), active(under).get("reason")) == ("False", "ParentInactive")
                and (active(orphan).get("status"), active(orphan).get("reason")) == ("False", "ParentNotFound"))

    try:
        ops.cluster.wait_for("the cycle's queues and the one under them to be reported inactive", reported,
                             timeout=30, interval=1)
    except AssertionError as exc:
        seen = {q: _queue_status(ops, q) for q in (first, second, under, orphan)}
        raise AssertionError(f"{exc}; queue status: {json.dumps(seen)[:1500]}") from None
    assert "cycle" in active(first)["message"] and first in active(under)["message"]
    status = ops.wait_phase("in-cycle", "Unschedulable", timeout=60)
    cond = ops.condition("in-cycle", "Unschedulable")
    assert cond is not None and cond["reason"] == "QueueInactive" and "cycle" in cond["message"], status
    assert not ops.pods("in-cycle")
    assert missing in active(orphan)["message"], active(orphan)
    ops.wait_phase("orphaned", "Unschedulable", timeout=60)
    cond = ops.condition("orphaned", "Unschedulable")
    assert cond is not None and cond["reason"] == "QueueInactive", ops.status("orphaned")
    assert not ops.pods("orphaned")
    # One team's broken queues do not stop the others: a queue outside the cycle admits meanwhile.
    fine = ops.queue("outside", [(H100, 8)])
    ops.job("elsewhere", fine, 1, 8)
    ops.wait_phase("elsewhere", "Running", timeout=60)
    ops.cluster.wait_for("outside's Active condition", lambda: (active(fine).get("status"), active(fine).get(
        "reason")) == ("True", "InQuotaTree"), timeout=30, interval=1)
    # Fixed, the cycle's queues are back and the waiting job runs.
    ops.cluster.kubectl("patch", "gpuqueue", first, "--type", "json",
                        "-p", json.dumps([{"op": "remove", "path": "/spec/parent"}]))
    ops.wait_phase("in-cycle", "Running", timeout=60)
    ops.cluster.wait_for("the fixed queues to be active", lambda: all(
        active(q).get("status") == "True" for q in (first, second, under)), timeout=30, interval=1)
    # The missing parent created, the orphan joins the tree and its job runs.
    assert ops.queue("later", [(H100, 8)]) == missing
    ops.wait_phase("orphaned", "Running", timeout=60)
    ops.cluster.wait_for("the orphan to be active", lambda: active(orphan).get("status") == "True",
                         timeout=30, interval=1)


def test_queue_position_cohort_is_the_heads_place_among_the_heads_of_its_tree(ops: Ops) -> None:
    """docs/api.md: ``queuePosition.cohort`` is the job's queue's head's place among the heads of its tree.
    Two full leaves of one root each have one job waiting: the older one's head goes first."""
    import time

    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 0)])
    qa = ops.queue("qa", [(H100, 16)], parent=org)
    qb = ops.queue("qb", [(H100, 16)], parent=org)
    ops.job("run-a", qa, 2, 8)
    ops.job("run-b", qb, 2, 8)
    ops.wait_phase("run-a", "Running", timeout=90)
    ops.wait_phase("run-b", "Running", timeout=90)
    ops.job("wait-a", qa, 1, 8)
    time.sleep(1.1)  # creationTimestamp has whole seconds: wait-b is the younger head
    ops.job("wait-b", qb, 1, 8)

    def position(name: str) -> dict[str, Any]:
        return dict(ops.status(name).get("queuePosition") or {})

    ops.cluster.wait_for("both positions written", lambda: bool(position("wait-a")) and bool(position("wait-b")),
                         timeout=45, interval=1)
    a, b = position("wait-a"), position("wait-b")
    assert (a["queue"], a["cohort"]) == (1, 1), a
    assert (b["queue"], b["cohort"], b["ahead"], b["aheadGPUs"]) == (1, 2, 1, 8), b


# -- a spec the CRD of an older version let through -------------------------------------------------
SPEC_RULES = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/x-kubernetes-validations"
"""JSON pointer, in the GPUQueue CRD, to the rules on ``spec`` (borrowingLimit and lendingLimit need a parent)."""


def test_a_queue_spec_an_older_crd_let_through_is_invalid_spec_its_subtree_parent_inactive(ops: Ops) -> None:
    """docs/api.md: ``InvalidSpec``, naming the field, for a queue whose spec the operator cannot read,
    such as a value an older CRD let through, with the queues under it ``ParentInactive``. The test
    plays the upgrade: the CRD's rule is taken out while a root queue with a borrowingLimit is written,
    then put back. The rest of the tree admits meanwhile, and a fixed spec brings the subtree back."""
    ops.cluster.use_shape("superpod-h100")
    crd = "gpuqueues.kubegang.io"
    rules = ops.cluster.get_json("crd", crd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"]["x-kubernetes-validations"]
    assert any("borrowingLimit" in r["rule"] for r in rules), rules
    root = f"{ops.namespace}-old-root"
    body = {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": root},
            "spec": {"resources": [{"flavor": H100, "nominal": 8, "borrowingLimit": 4}]}}
    ops.cluster.kubectl("patch", "crd", crd, "--type", "json", "-p", json.dumps(
        [{"op": "test", "path": SPEC_RULES, "value": rules}, {"op": "remove", "path": SPEC_RULES}]))
    try:
        # The API server takes a moment to serve the changed schema.
        ops.cluster.wait_for(f"GPUQueue {root} accepted without the rule", lambda: ops.cluster.kubectl(
            "apply", "-f", "-", input=json.dumps(body), check=False).returncode == 0, timeout=60, interval=1)
        ops.queues.append(root)
    finally:
        ops.cluster.kubectl("patch", "crd", crd, "--type", "json",
                            "-p", json.dumps([{"op": "add", "path": SPEC_RULES, "value": rules}]))
    ops.cluster.wait_for("the rule back in force", lambda: ops.cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", check=False,
        input=json.dumps({**body, "metadata": {"name": f"{root}-probe"}})).returncode != 0, timeout=60, interval=1)
    under = ops.queue("under-old-root", [(H100, 8)], parent=root)
    ops.job("waits", under, 1, 8)
    fine = ops.queue("elsewhere", [(H100, 8)])
    ops.job("runs", fine, 1, 8)

    def active(queue: str) -> dict[str, Any]:
        return next((c for c in _queue_status(ops, queue).get("conditions") or [] if c.get("type") == "Active"), {})

    ops.cluster.wait_for("the old root InvalidSpec and the queue under it ParentInactive", lambda: (
        (active(root).get("status"), active(root).get("reason")) == ("False", "InvalidSpec")
        and (active(under).get("status"), active(under).get("reason")) == ("False", "ParentInactive")),
        timeout=30, interval=1)
    assert "borrowingLimit" in active(root)["message"], active(root)
    assert root in active(under)["message"], active(under)
    ops.wait_phase("waits", "Unschedulable", timeout=60)
    cond = ops.condition("waits", "Unschedulable")
    assert cond is not None and cond["reason"] == "QueueInactive", ops.status("waits")
    assert not ops.pods("waits")
    ops.wait_phase("runs", "Running", timeout=60)

    # Fixed as the new CRD demands, the subtree joins the tree and the waiting job runs.
    ops.cluster.kubectl("patch", "gpuqueue", root, "--type", "json",
                        "-p", json.dumps([{"op": "remove", "path": "/spec/resources/0/borrowingLimit"}]))
    ops.wait_phase("waits", "Running", timeout=60)
    ops.cluster.wait_for("the fixed queues active", lambda: all(
        active(q).get("status") == "True" for q in (root, under)), timeout=30, interval=1)
