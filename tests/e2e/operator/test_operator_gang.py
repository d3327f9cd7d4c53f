"""Issue 6, scenario 1: two gangs that each need 60% of the cluster.

With kubegang one runs whole and the other waits whole, holding nothing; the same pods through the
default scheduler end up split, each gang holding GPUs while waiting for GPUs the other holds.
"""

from __future__ import annotations

import time
from typing import Any

NODES, GPUS_PER_NODE = 128, 8  # hack/shapes/superpod-h100.yaml
H100 = "NVIDIA-H100-80GB-HBM3"
REPLICAS = 77  # 77 x 8 = 616 GPUs: 60% of 1024, two of them do not fit


def test_two_sixty_percent_gangs_one_runs_whole_the_other_waits_holding_nothing(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    # Quota for both: what stops the second gang must be the GPUs, not the queue.
    q = ops.queue("all", [(H100, 2 * NODES * GPUS_PER_NODE)])
    ops.job("first", q, REPLICAS, GPUS_PER_NODE)
    ops.wait_phase("first", "Admitted", "Running", timeout=60)
    ops.job("second", q, REPLICAS, GPUS_PER_NODE)

    ops.wait_phase("first", "Running", timeout=180)
    assert len(ops.running_pods("first")) == REPLICAS
    waiting = ops.wait_phase("second", "Queued", timeout=60)
    cond = ops.condition("second", "Queued")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "InsufficientGPUs", waiting
    # Whole: not one pod of the waiting gang exists, so it holds no GPU; and it stays that way.
    for _ in range(5):
        assert ops.pods("second") == []
        time.sleep(1)
    assert len(ops.running_pods("first")) == REPLICAS
    assert waiting.get("admittedAt") is None


def _plain_pod(namespace: str, gang: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        # The opt-out label keeps the chart's GPU routing policy (hack/localstack.py applies it) from
        # sending these baseline pods to kubegang: they must go through the default scheduler.
        "metadata": {"name": f"{gang}-{index}", "namespace": namespace,
                     "labels": {"plain-gang": gang, "kubegang.io/routing": "disabled"}},
        "spec": {
            "schedulerName": "default-scheduler",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": GPUS_PER_NODE}}}],
        },
    }


def test_the_same_gangs_through_the_default_scheduler_deadlock_split(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    # Submitted together, as a job controller would: pods of both gangs arrive interleaved.
    pods = [_plain_pod(ops.namespace, gang, i) for i in range(REPLICAS) for gang in ("a", "b")]
    ops.cluster.apply({"apiVersion": "v1", "kind": "List", "items": pods})

    def phases() -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {"a": {}, "b": {}}
        for pod in ops.cluster.get_json("pods", "-n", ops.namespace)["items"]:
            gang = pod["metadata"]["labels"]["plain-gang"]
            status = pod.get("status", {})
            phase = status.get("phase", "Pending")
            if phase == "Pending" and any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                                          for c in status.get("conditions") or []):
                phase = "Unschedulable"
            out[gang][phase] = out[gang].get(phase, 0) + 1
        return out

    # Settled: every pod runs or was found unschedulable (no GPUs left anywhere).
    ops.cluster.wait_for("the default scheduler to settle", lambda: sum(
        g.get("Running", 0) + g.get("Unschedulable", 0) for g in phases().values()) == 2 * REPLICAS,
        timeout=240, interval=2)
    final = phases()
    assert sum(g.get("Running", 0) for g in final.values()) <= NODES
    for gang in ("a", "b"):
        running, stuck = final[gang].get("Running", 0), final[gang].get("Unschedulable", 0)
        # Split: part of each gang holds GPUs while the rest can never start: neither can run.
        assert 0 < running < REPLICAS and stuck == REPLICAS - running, final
