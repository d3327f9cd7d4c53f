"""``gangTimeoutSeconds`` end to end: a gang whose pods are bound but never started is requeued whole.

A kubelet that cannot pull an image (or a node whose kubelet is wedged) leaves a bound pod Pending;
its GPUs are held and the rest of the gang cannot run without it. kwok's pod-ready stage skips a pod
annotated ``kubegang.io/fake-never-start`` (hack/devcluster.py), which is exactly that pod. A healthy
gang with the same timeout, running next to it, shows the rule does not touch gangs that started.
"""

from __future__ import annotations

from typing import Any

from .conftest import H100

NEVER_START = {"kubegang.io/fake-never-start": "true"}
TIMEOUT_S = 15


def _bound(ops: Any, job: str) -> dict[str, str]:
    """Pod uid -> node, for the job's live pods that are bound (a pod's name repeats across attempts)."""
    return {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in ops.pods(job) if p["spec"].get("nodeName")}


def test_a_gang_whose_bound_pods_never_start_is_requeued_whole_with_those_nodes_excluded(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("all", [(H100, 64)])
    ops.job("healthy", q, 2, 8, gangTimeoutSeconds=TIMEOUT_S)
    ops.job("stuck", q, 2, 8, annotations=NEVER_START, gangTimeoutSeconds=TIMEOUT_S)

    ops.cluster.wait_for("both pods of stuck bound", lambda: len(_bound(ops, "stuck")) == 2, timeout=60, interval=1)
    first = _bound(ops, "stuck")
    assert {p["status"].get("phase") for p in ops.pods("stuck")} == {"Pending"}

    def requeued() -> bool:
        return bool(ops.status("stuck").get("excludedNodes"))

    ops.cluster.wait_for("stuck to be requeued", requeued, timeout=TIMEOUT_S + 60, interval=1)
    status = ops.status("stuck")
    assert set(first.values()) <= set(status["excludedNodes"]), status
    timeouts = [e for e in ops.events("stuck") if e.get("reason") == "GangTimeout"]
    assert timeouts, ops.events("stuck")
    assert "2 bound but not started" in timeouts[0]["message"], timeouts[0]
    assert "0 not bound" in timeouts[0]["message"], timeouts[0]

    # Whole: the first attempt's pods are gone, and the next attempt is placed off the excluded nodes.
    def next_attempt_bound() -> bool:
        now = _bound(ops, "stuck")
        return len(now) == 2 and not set(now) & set(first)

    ops.cluster.wait_for("stuck's next attempt bound", next_attempt_bound, timeout=60, interval=1)
    assert not set(_bound(ops, "stuck").values()) & set(first.values())

    # The healthy gang started within its timeout and is left alone, long past it.
    healthy = ops.status("healthy")
    assert healthy.get("phase") == "Running" and not healthy.get("excludedNodes"), healthy
    assert len(ops.running_pods("healthy")) == 2
    assert not [e for e in ops.events("healthy") if e.get("reason") == "GangTimeout"]


def _planned(ops: Any, job: str) -> dict[str, str]:
    """Pod uid -> the node kubegang planned for it (the pod's ``kubegang.io/node`` annotation), bound or not."""
    return {p["metadata"]["uid"]: p["metadata"]["annotations"]["kubegang.io/node"] for p in ops.pods(job)
            if not p["metadata"].get("deletionTimestamp")}


def test_a_gang_whose_pods_kube_scheduler_never_binds_is_requeued_whole_with_the_planned_nodes_excluded(
        ops: Any) -> None:
    """The other half of the rule: a pod that is never bound. Its template asks for an extended resource
    no node has; kubegang places by GPUs and leaves that to kube-scheduler, which refuses every node, so
    the pods stay unbound on their planned nodes until the timeout requeues the gang whole and keeps
    the next attempt off those nodes."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("all", [(H100, 64)])
    manifest = ops.job_manifest("unbindable", q, 2, 8, gangTimeoutSeconds=TIMEOUT_S)
    limits = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["example.com/widget"] = 1
    ops.cluster.apply(manifest)

    ops.cluster.wait_for("both pods of unbindable created", lambda: len(_planned(ops, "unbindable")) == 2,
                         timeout=60, interval=1)
    first = _planned(ops, "unbindable")
    assert not _bound(ops, "unbindable"), ops.pods("unbindable")

    def requeued() -> bool:
        return bool(ops.status("unbindable").get("excludedNodes"))

    ops.cluster.wait_for("unbindable to be requeued", requeued, timeout=TIMEOUT_S + 60, interval=1)
    status = ops.status("unbindable")
    assert set(first.values()) <= set(status["excludedNodes"]), status
    timeouts = [e for e in ops.events("unbindable") if e.get("reason") == "GangTimeout"]
    assert timeouts, ops.events("unbindable")
    assert "2 not bound" in timeouts[0]["message"], timeouts[0]
    assert "0 bound but not started" in timeouts[0]["message"], timeouts[0]

    def next_attempt_created() -> bool:
        now = _planned(ops, "unbindable")
        return len(now) == 2 and not set(now) & set(first)

    ops.cluster.wait_for("unbindable's next attempt created", next_attempt_created, timeout=60, interval=1)
    assert not set(_planned(ops, "unbindable").values()) & set(first.values())
    assert not _bound(ops, "unbindable")
