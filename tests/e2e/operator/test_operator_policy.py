"""Issue 6, scenarios 2-6: topology, borrowing and reclaim, priority preemption, gang restarts, and a
job its queue can never hold — each checked through the API as a user would see it."""

from __future__ import annotations

import datetime as dt
from typing import Any

H100 = "NVIDIA-H100-80GB-HBM3"
GB200 = "NVIDIA-GB200"


def _nodes_of(ops: Any, job: str) -> set[str]:
    return {p["spec"]["nodeName"] for p in ops.running_pods(job)}


def _preempted(ops: Any, job: str) -> bool:
    cond = ops.condition(job, "Preempted")
    return cond is not None and cond["status"] == "True"


# -- 2. topology ----------------------------------------------------------------------------------
def test_required_leaf_is_honoured_on_the_superpod(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")  # 4 leaves of 32 nodes x 8 GPUs
    q = ops.queue("topo", [(H100, 2048)])
    ops.job("in-leaf", q, 24, 8, topology={"required": "leaf"})
    ops.wait_phase("in-leaf", "Running", timeout=120)
    labels = ops.node_labels()
    nodes = _nodes_of(ops, "in-leaf")
    assert len(nodes) == 24
    assert len({labels[n]["kubegang.io/leaf"] for n in nodes}) == 1, nodes
    # One more than a leaf has nodes: never placed across leaves, and said to be impossible (it would
    # otherwise wait forever): Unschedulable with the extender's reason.
    ops.job("too-wide", q, 33, 8, topology={"required": "leaf"})
    status = ops.wait_phase("too-wide", "Unschedulable", timeout=60)
    cond = ops.condition("too-wide", "Unschedulable")
    assert cond is not None and cond["reason"] == "ExceedsCluster", status
    assert cond["message"].endswith("no leaf could ever hold it (at most 32 with every GPU free)"), cond
    assert ops.pods("too-wide") == []


def test_a_72_gpu_job_lands_in_one_nvlink_domain_on_gb200(ops: Any) -> None:
    ops.cluster.use_shape("gb200-nvl72")  # 4 racks (NVLink domains) of 18 trays x 4 GPUs
    # The agent publishes each tray's NVLink domain (GPUNode status) a moment after the node exists;
    # a gang planned before that is placed without knowing the racks.
    def domains() -> dict[str, str | None]:
        return {gn["metadata"]["name"]: ((gn.get("status") or {}).get("nvlinkDomain") or {}).get("id")
                for gn in ops.cluster.get_json("gpunodes")["items"]}

    ops.cluster.wait_for("every tray's NVLink domain", lambda: len(
        [d for d in domains().values() if d]) == 72, timeout=60, interval=1)
    q = ops.queue("nvl", [(GB200, 288)])
    # A small job first, so one rack is no longer whole and the big one must find another.
    ops.job("small", q, 1, 4)
    ops.wait_phase("small", "Running", timeout=60)
    ops.job("nvl72", q, 18, 4)
    ops.wait_phase("nvl72", "Running", timeout=120)
    rack = domains()
    nodes = _nodes_of(ops, "nvl72")
    assert len(nodes) == 18
    assert len({rack[n] for n in nodes}) == 1, {n: rack[n] for n in nodes}
    assert rack[next(iter(_nodes_of(ops, "small")))] not in {rack[n] for n in nodes}
    assert ops.status("nvl72")["placement"]["level"] == "nvlink"



def test_required_nvlink_waits_for_a_whole_rack_on_gb200_while_a_leaf_has_room(ops: Any) -> None:
    """``topology.required: nvlink`` where it could fail: with one tray of every NVL72 rack taken, an
    18-tray gang that must stay in one rack waits (no pods) while the same gang allowed a leaf runs
    across two racks; 19 trays could never be in one rack and are Unschedulable at once; a rack that
    gets its tray back runs the waiting gang inside it."""
    ops.cluster.use_shape("gb200-nvl72")  # 4 racks (NVLink domains) of 18 trays x 4 GPUs, 2 racks a leaf

    def domains() -> dict[str, str | None]:
        return {gn["metadata"]["name"]: ((gn.get("status") or {}).get("nvlinkDomain") or {}).get("id")
                for gn in ops.cluster.get_json("gpunodes")["items"]}

    ops.cluster.wait_for("every tray's NVLink domain", lambda: len(
        [d for d in domains().values() if d]) == 72, timeout=60, interval=1)
    rack = domains()
    fillers: dict[str, str] = {}  # filler pod -> its rack
    for i, domain in enumerate(sorted({d for d in rack.values() if d})):
        node = min(n for n, d in rack.items() if d == domain)
        fillers[f"filler-{i}"] = domain
        ops.cluster.apply({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"filler-{i}", "namespace": ops.namespace,
                         "labels": {"kubegang.io/routing": "disabled"}},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 4}}}]},
        })
    assert len(fillers) == 4, fillers
    q = ops.queue("nvl-req", [(GB200, 288)])
    ops.job("in-rack", q, 18, 4, topology={"required": "nvlink"})
    ops.job("in-leaf", q, 18, 4, topology={"required": "leaf"})
    ops.job("too-wide", q, 19, 4, topology={"required": "nvlink"})

    ops.wait_phase("too-wide", "Unschedulable", timeout=60)
    cond = ops.condition("too-wide", "Unschedulable")
    assert cond is not None and cond["reason"] == "ExceedsCluster", ops.status("too-wide")
    assert "could ever hold it (at most 18 with every GPU free)" in cond["message"], cond
    in_leaf = ops.wait_phase("in-leaf", "Running", timeout=120)["placement"]
    leaf_racks = {rack[n] for n in _nodes_of(ops, "in-leaf")}
    assert in_leaf["level"] == "leaf" and len(leaf_racks) == 2, (in_leaf, leaf_racks)
    # 17 free trays in every rack and 34 in a leaf: room for in-rack's 18 trays, but not inside one rack.
    assert ops.phase("in-rack") in ("Queued", "Unschedulable") and not ops.pods("in-rack"), ops.status("in-rack")
    assert not ops.pods("too-wide")

    freed = next(name for name, domain in fillers.items() if domain not in leaf_racks)
    ops.cluster.kubectl("delete", "pod", freed, "-n", ops.namespace, "--wait=true")
    in_rack = ops.wait_phase("in-rack", "Running", timeout=120)["placement"]
    assert in_rack["level"] == "nvlink", in_rack
    assert {rack[n] for n in _nodes_of(ops, "in-rack")} == {fillers[freed]}
    assert len(_nodes_of(ops, "in-rack")) == 18

# -- 3. borrowing and reclaim ---------------------------------------------------------------------
def test_borrowed_gang_is_preempted_whole_when_the_lender_submits_and_runs_again_later(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [(H100, 0)])
    team_a = ops.queue("team-a", [(H100, 32)], parent=org)
    team_b = ops.queue("team-b", [(H100, 32)], parent=org, preemption={"reclaimFromBorrowers": "Any"})
    ops.job("a-big", team_a, 6, 8)  # 48 GPUs: 16 of them borrowed from idle team-b
    ops.wait_phase("a-big", "Running", timeout=90)
    first_attempt = {p["metadata"]["name"]: p["metadata"]["labels"]["kubegang.io/attempt"]
                     for p in ops.pods("a-big")}
    # Queue status is written in the background (at most every 5 s): wait for it to show the loan.
    def borrowed() -> object:
        return (ops.cluster.get_json("gpuqueue", team_a).get("status") or {}).get("borrowed")

    ops.cluster.wait_for("team-a's status to show what it borrows", lambda: bool(borrowed()), timeout=30)
    assert borrowed() == [{"flavor": H100, "gpus": 16}], borrowed()

    ops.job("b-job", team_b, 4, 8, annotations={"kubegang.io/fake-runtime": "20s"})
    ops.cluster.wait_for("a-big to be preempted", lambda: _preempted(ops, "a-big"), timeout=60)
    message = ops.condition("a-big", "Preempted")["message"]
    assert f"{ops.namespace}/b-job" in message and "reclaim nominal quota" in message, message
    ops.wait_phase("b-job", "Running", timeout=90)
    # Whole: no pod of the preempted attempt is left; it waits in its queue.
    assert not any(p["metadata"]["labels"]["kubegang.io/attempt"] in first_attempt.values()
                   for p in ops.pods("a-big"))
    assert ops.status("a-big")["phase"] == "Queued"
    assert any(e["reason"] == "Preempted" for e in ops.events("a-big"))

    ops.wait_phase("b-job", "Succeeded", timeout=90)
    ops.wait_phase("a-big", "Running", timeout=120)
    assert len(ops.running_pods("a-big")) == 6


# -- 4. priority preemption -----------------------------------------------------------------------
def test_high_priority_job_preempts_only_as_many_lower_priority_gangs_as_it_needs(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("prio", [(H100, 64)], preemption={"withinQueue": "LowerPriority"})
    lows = [f"low-{i}" for i in range(4)]
    for name in lows:  # 4 x 16 GPUs fill the queue
        ops.job(name, q, 2, 8, priority=0)
    for name in lows:
        ops.wait_phase(name, "Running", timeout=90)
    ops.job("high", q, 4, 8, priority=100)  # 32 GPUs: two low gangs must go, not more
    ops.wait_phase("high", "Running", timeout=120)
    preempted = [name for name in lows if _preempted(ops, name)]
    assert len(preempted) == 2, {n: ops.status(n).get("phase") for n in lows}
    for name in preempted:
        assert ops.status(name)["phase"] == "Queued"
        assert f"{ops.namespace}/high" in ops.condition(name, "Preempted")["message"]
        assert ops.pods(name) == []
    for name in set(lows) - set(preempted):
        assert ops.status(name)["phase"] == "Running" and len(ops.running_pods(name)) == 2


def test_a_job_behind_a_preempting_head_of_its_queue_says_it_waits_behind_it(ops: Any) -> None:
    """docs/operator.md, Reading conditions: `WaitingInQueue` names the job of its queue the cycle stopped
    at. Victims' pods held Terminating by a finalizer keep the preemptor Preempting, and a queue whose head
    is preempting for room tries none of the jobs behind it."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("behind", [(H100, 32)], preemption={"withinQueue": "LowerPriority"})
    lows = ["low-0", "low-1"]
    for name in lows:  # 2 x 16 GPUs fill the queue
        ops.job(name, q, 2, 8, priority=0)
    for name in lows:
        ops.wait_phase(name, "Running", timeout=90)
    held = [p["metadata"]["name"] for name in lows for p in ops.pods(name)]
    for pod in held:
        ops.cluster.kubectl("patch", "pod", pod, "-n", ops.namespace, "--type=merge", "-p",
                            '{"metadata":{"finalizers":["example.com/hold"]}}')
    try:
        ops.job("high", q, 2, 8, priority=100)
        ops.cluster.wait_for("high to preempt", lambda: ops.status("high").get("reason") == "Preempting",
                             timeout=90)
        ops.job("mid", q, 1, 8, priority=50)
        status = ops.wait_phase("mid", "Queued", timeout=60)
        cond = ops.condition("mid", "Queued")
        assert status.get("reason") == "WaitingInQueue", status
        expected = f"waiting in queue {q} behind {ops.namespace}/high (Preempting)"
        assert cond is not None and cond["message"] == expected, cond
        assert ops.pods("mid") == []
    finally:
        for pod in held:
            ops.cluster.kubectl("patch", "pod", pod, "-n", ops.namespace, "--type=merge", "-p",
                                '{"metadata":{"finalizers":null}}', check=False)
    ops.wait_phase("high", "Running", timeout=120)


def test_without_a_preemption_policy_a_higher_priority_job_waits_for_quota_and_evicts_nothing(ops: Any) -> None:
    """docs/api.md: `preemption.withinQueue` defaults to `Never`."""
    import time

    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("noprio", [(H100, 32)])
    lows = ["low-0", "low-1"]
    for name in lows:  # 2 x 16 GPUs fill the queue
        ops.job(name, q, 2, 8, priority=0)
    for name in lows:
        ops.wait_phase(name, "Running", timeout=90)
    ops.job("high", q, 2, 8, priority=100)
    status = ops.wait_phase("high", "Queued", timeout=60)
    assert status["reason"] == "QuotaExhausted", status  # decided: no room, and no one to evict
    time.sleep(6)  # a few more cycles, and a queue-position refresh
    assert ops.phase("high") == "Queued" and ops.pods("high") == []
    for name in lows:
        assert ops.phase(name) == "Running" and len(ops.running_pods(name)) == 2
        assert ops.condition(name, "Preempted") is None, ops.status(name)


# -- 5. restarts ----------------------------------------------------------------------------------
def test_failing_worker_restarts_the_whole_gang_then_fails_after_restart_limit(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("restart", [(H100, 64)])
    ops.job("crashy", q, 3, 8, restartLimit=2,
            annotations={"kubegang.io/fake-exit-code": "1", "kubegang.io/fake-fail-after": "2s"})
    status = ops.wait_phase("crashy", "Failed", timeout=180)
    assert status["restarts"] == 2, status
    cond = ops.condition("crashy", "Failed")
    assert cond is not None and cond["reason"] == "RestartLimitReached", status
    assert "restartLimit 2 reached" in cond["message"] and "exit code 1" in cond["message"], cond
    restarting = [e for e in ops.events("crashy") if e["reason"] == "GangRestarting"]
    assert len(restarting) == 2 and all("restarting the whole gang" in e["message"] for e in restarting)
    # Only the last attempt's finished pods are kept (for their logs); workers still running when the
    # first one failed were deleted with the gang, and every earlier attempt went whole.
    pods = ops.pods("crashy")
    assert 1 <= len(pods) <= 3 and len({p["metadata"]["labels"]["kubegang.io/attempt"] for p in pods}) == 1
    assert all(p["status"]["phase"] == "Failed" for p in pods)


def test_a_gang_past_its_time_limit_is_failed_whole_and_gives_its_gpus_back(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("limit", [(H100, 24)])
    ops.job("overrun", q, 2, 8, timeLimitSeconds=5)  # a kwok pod runs until it is deleted
    ops.job("in-time", q, 1, 8, timeLimitSeconds=120, annotations={"kubegang.io/fake-runtime": "3s"})
    ops.wait_phase("overrun", "Running", timeout=90)
    status = ops.wait_phase("overrun", "Failed", timeout=60)
    cond = ops.condition("overrun", "Failed")
    assert cond is not None and cond["reason"] == "TimeLimitExceeded", status
    assert "timeLimitSeconds (5s)" in cond["message"], cond
    ran = (dt.datetime.fromisoformat(status["finishedAt"].replace("Z", "+00:00"))
           - dt.datetime.fromisoformat(status["startedAt"].replace("Z", "+00:00"))).total_seconds()
    assert 5 <= ran <= 30, status  # not before the limit, and not long after it
    assert status.get("restarts", 0) == 0, status  # no restart: it would only run out of time again
    ops.cluster.wait_for("the overrun gang's pods to be deleted", lambda: ops.pods("overrun") == [],
                         timeout=30, interval=1)
    assert ops.wait_phase("in-time", "Succeeded", timeout=90)["phase"] == "Succeeded"
    # Its 16 GPUs are the queue's again: a gang of the whole queue runs.
    ops.job("after", q, 3, 8)
    ops.wait_phase("after", "Running", timeout=90)


def test_a_restarted_gang_gets_its_time_limit_afresh_from_its_new_start(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("limit-restart", [(H100, 16)])
    # Each attempt fails 12 s into running, inside its 20 s limit. Counted from the first start, the
    # limit would end the second attempt 8 s in (TimeLimitExceeded); counted afresh, the second
    # attempt fails on its own and the job ends with its restart limit reached.
    ops.job("retry", q, 2, 8, timeLimitSeconds=20, restartLimit=1,
            annotations={"kubegang.io/fake-exit-code": "1", "kubegang.io/fake-fail-after": "12s"})
    first = ops.wait_phase("retry", "Running", timeout=90)["startedAt"]
    ops.cluster.wait_for("the second attempt to start", lambda: (ops.status("retry").get("restarts") == 1
                         and ops.status("retry").get("startedAt") not in (None, first)), timeout=90, interval=1)
    status = ops.wait_phase("retry", "Failed", timeout=90)
    cond = ops.condition("retry", "Failed")
    assert cond is not None and cond["reason"] == "RestartLimitReached", status
    ran = (dt.datetime.fromisoformat(status["finishedAt"].replace("Z", "+00:00"))
           - dt.datetime.fromisoformat(status["startedAt"].replace("Z", "+00:00"))).total_seconds()
    assert status["startedAt"] != first and ran < 20, status


# -- 6. larger than the queue can ever hold -------------------------------------------------------
def test_job_larger_than_its_queue_can_ever_hold_is_unschedulable_with_the_reason(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("small", [(H100, 16)])
    ops.job("huge", q, 4, 8)
    status = ops.wait_phase("huge", "Unschedulable", timeout=60)
    cond = ops.condition("huge", "Unschedulable")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "ExceedsQueueCapacity", status
    assert q in cond["message"] and "32" in cond["message"], cond
    assert ops.pods("huge") == []
