"""Issue 11 on the real control plane: every GPU field reaches the pods, and no job stops the others.

The symptoms this replays: a `gpuFraction` job stopped every queue (the cycle raised on it), an MPI job
with `gpusPerReplica: 8` ran with `resources: {}`, a 9-GPU pod on 8-GPU nodes stayed Queued forever,
and a missing queue said `ExceedsQueueCapacity`.
"""

from __future__ import annotations

from typing import Any

from .conftest import H100
from .test_job_fields import _table


def _no_template_gpus(manifest: dict[str, Any]) -> dict[str, Any]:
    del manifest["spec"]["template"]["spec"]["containers"][0]["resources"]
    return manifest


def _gpu_limit(pod: dict[str, Any]) -> Any:
    return (pod["spec"]["containers"][0].get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")


def test_a_shared_gpu_job_and_whole_gpu_jobs_all_run_with_the_gpus_they_asked_for(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("share", [(H100, 32)])
    # The shared job first: it used to stop the cycle before anything behind it was admitted.
    embedder = _no_template_gpus(ops.job_manifest("embedder", q, 1, 0, gpuFraction=250))
    containers = embedder["spec"]["template"]["spec"]["containers"]
    containers.append({**containers[0], "name": "sidecar"})  # sharing.md: the env is in every container
    ops.cluster.apply(embedder)
    ops.job("plain", q, 2, 4)
    ops.cluster.apply(_no_template_gpus(ops.job_manifest("mpi", q, 2, 0, gpusPerReplica=8, framework="mpi")))
    for name in ("embedder", "plain", "mpi"):
        ops.wait_phase(name, "Running", timeout=90)

    [shared] = ops.running_pods("embedder")
    notes = shared["metadata"]["annotations"]
    assert notes["kubegang.io/gpu-milli"] == "250" and notes["kubegang.io/gpus"].isdigit()
    assert _gpu_limit(shared) is None  # no whole GPU: the share is accounted by kubegang
    assert [c["name"] for c in shared["spec"]["containers"]] == ["main", "sidecar"], shared["spec"]["containers"]
    for container in shared["spec"]["containers"]:
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == notes["kubegang.io/gpus"], (container["name"], env)
        assert env["KUBEGANG_GPU_MILLI"] == "250", (container["name"], env)
    status = ops.status("embedder")
    assert status["totalGPUs"] == 0.25
    assert status["placement"]["pods"][0]["gpuMilli"] == 250
    for pod in ops.running_pods("plain"):
        assert str(_gpu_limit(pod)) == "4"
    mpi = ops.running_pods("mpi")
    assert len(mpi) == 2 and all(str(_gpu_limit(p)) == "8" for p in mpi)
    # The share's GPU is nobody else's: no whole-GPU pod on that node was given that index.
    node, gpu = shared["spec"]["nodeName"], notes["kubegang.io/gpus"]
    for pod in [*ops.running_pods("plain"), *mpi]:
        if pod["spec"]["nodeName"] == node:
            assert gpu not in pod["metadata"]["annotations"]["kubegang.io/gpus"].split(",")
    # Quota counts the share: 0.25 + 2 x 4 + 2 x 8.
    ops.cluster.wait_for("queue usage to count the share",
                         lambda: ops.cluster.get_json("gpuqueue", q).get("status", {}).get("usedGPUs") == 24.25,
                         timeout=30, interval=1)
    # docs/sharing.md: `kubectl get gq` shows usage with fractions.
    _, rows = _table(ops.cluster.kubectl("get", "gq", q).stdout)
    assert rows[q]["USAGE"] == "24.25", rows


def test_a_pod_larger_than_every_node_is_unschedulable_and_a_missing_queue_says_so(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("big", [(H100, 64)])
    ops.job("nine", q, 1, 9)
    ops.job("lost", f"{ops.namespace}-no-such-queue", 1, 8)
    # The template keeps unknown fields, so a misspelt toleration operator passes `kubectl apply`.
    misspelt = ops.job_manifest("misspelt", q, 1, 8)
    misspelt["spec"]["template"]["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exist"}]
    ops.cluster.apply(misspelt)
    ops.job("after", q, 1, 8)
    ops.wait_phase("after", "Running", timeout=90)
    ops.wait_phase("nine", "Unschedulable", timeout=60)
    cond = ops.condition("nine", "Unschedulable")
    assert cond is not None and cond["reason"] == "ExceedsCluster"
    assert cond["message"].startswith("each pod needs 9 NVIDIA-H100-80GB-HBM3 GPUs, but the largest")
    assert cond["message"].endswith("has 8")
    ops.wait_phase("lost", "Unschedulable", timeout=60)
    lost = ops.condition("lost", "Unschedulable")
    assert lost is not None and lost["reason"] == "QueueNotFound"
    assert "does not exist" in lost["message"]
    ops.wait_phase("misspelt", "Unschedulable", timeout=60)
    invalid = ops.condition("misspelt", "Unschedulable")
    assert invalid is not None and invalid["reason"] == "InvalidSpec", ops.status("misspelt")
    assert "spec.template.spec.tolerations[0]" in invalid["message"] and "Exist" in invalid["message"], invalid
    assert ops.pods("nine") == [] and ops.pods("lost") == [] and ops.pods("misspelt") == []
