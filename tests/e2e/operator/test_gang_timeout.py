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
