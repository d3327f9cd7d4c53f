"""One inconsistent GPUNode degrades only the nodes involved; placement goes on for everybody.

A rogue GPUNode reports the very GPUs (same UUIDs) that the agent reported for a real node. The
core refuses such a topology as a whole; the extender must set aside the GPUNode data of the two
nodes involved, say so in ``/debug/snapshot``, and keep placing gangs, on those nodes too.
"""

from __future__ import annotations

import json
from typing import Any

from kubegang.placement import GangRequest, Placement

ROGUE = "ext-rogue"


def test_a_gpu_reported_by_two_gpunodes_does_not_stop_placement(extender: Any, namespace: str) -> None:
    cluster = extender.cluster
    victim = sorted(extender.free_gpus())[0]
    status = cluster.get_json("gpunode", victim)["status"]
    # Not a kwok node (no type=kwok label): it stays NotReady and tainted, so nothing lands on it.
    cluster.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": ROGUE, "labels": {"kubegang.io/leaf": "leaf-a"}},
        "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "8", "memory": "64Gi", "pods": "110"},
                   "allocatable": {"nvidia.com/gpu": "8", "cpu": "8", "memory": "64Gi", "pods": "110"}}}))
    try:
        cluster.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "kubegang.io/v1alpha1", "kind": "GPUNode", "metadata": {"name": ROGUE}}))
        cluster.kubectl("patch", "gpunode", ROGUE, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": status}))

        def quarantined() -> dict[str, str]:
            found: dict[str, str] = extender.snapshot()["quarantined"]
            return found

        cluster.wait_for("the duplicated GPUs to be noticed", lambda: set(quarantined()) == {victim, ROGUE},
                         timeout=30)
        assert all("is reported by nodes" in reason for reason in quarantined().values()), quarantined()

        job = extender.new_job_uid()
        outcome = extender.reserve(GangRequest(id=job, pods=4, gpus_per_pod=8))
        assert isinstance(outcome.result, Placement), outcome.result
        planned = {f"g-{a.pod}": a.node for a in outcome.result.assignments}
        assert victim in planned.values() and ROGUE not in planned.values()
        extender.create_all([extender.gpu_pod(f"g-{a.pod}", namespace, 8, job_uid=job, index=a.pod, node=a.node,
                                              gpu_indices=a.gpus) for a in outcome.result.assignments])

        def bound() -> dict[str, str]:
            return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in extender.pods(namespace)
                    if p["spec"].get("nodeName")}

        cluster.wait_for("gang bound", lambda: len(bound()) == 4, timeout=60)
        assert bound() == planned
    finally:
        cluster.kubectl("delete", "gpunode", ROGUE, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "node", ROGUE, "--ignore-not-found", check=False)
    cluster.wait_for("quarantine lifted", lambda: extender.snapshot()["quarantined"] == {}, timeout=30)
