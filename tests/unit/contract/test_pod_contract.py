"""The operator's gang pods are read back by the extender as the very reservation they realise.

Operator and extender meet only through pod labels and annotations (kubegang.podcontract). If the
two ever read or write them differently, a restarted extender would treat gang pods as plain pods
and hand their GPUs to someone else; this test is the guard.
"""

from __future__ import annotations

from typing import Any

from kubegang.api import Placement, ReplicaPlacement
from kubegang.extender._ledger import held_pod
from kubegang.operator._gang_objects import build_gang
from kubegang.operator._job import job_view


def _job() -> dict[str, Any]:
    return {
        "apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "0b9c-uid", "generation": 1},
        "spec": {"replicas": 3, "queue": "team-a", "framework": "torchrun", "template": {"spec": {
            "containers": [{"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}},
    }


def test_every_gang_pod_is_held_by_its_job_at_its_index_on_its_planned_node() -> None:
    placement = Placement(pods=[ReplicaPlacement(index=i, node=f"n{i}", gpus=list(range(8))) for i in range(3)],
                              domain="leaf-0", level="leaf")
    gang = build_gang(job_view(_job()), placement)
    for pod in gang.pods:
        pod = {**pod, "metadata": {**pod["metadata"], "uid": f"pod-{pod['metadata']['name']}"}}
        held = held_pod(pod)
        assert held is not None
        index = int(pod["metadata"]["name"].rsplit("-", 1)[1])
        assert (held.owner, held.index, held.node, held.gpu_indices) == ("0b9c-uid", index, f"n{index}",
                                                                         tuple(range(8)))
