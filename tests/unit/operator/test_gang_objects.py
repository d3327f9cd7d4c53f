from __future__ import annotations

from typing import Any

import pytest

from kubegang.api import Placement, ReplicaPlacement, pod_spec_requests
from kubegang.operator._gang_objects import build_gang, mpi_hostfile
from kubegang.operator._job import job_view


def placement(n: int) -> Placement:
    return Placement(pods=[ReplicaPlacement(index=i, node=f"node-{i}", gpus=[0, 1]) for i in range(n)], domain="leaf-1")


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_every_pod_is_pinned_labelled_and_owned(job_body: Any) -> None:
    job = job_view(job_body(replicas=3))
    gang = build_gang(job, placement(3))
    assert [p["metadata"]["name"] for p in gang.pods] == ["train-0", "train-1", "train-2"]
    for i, pod in enumerate(gang.pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"]["kubegang.io/job-name"] == "train"
        assert meta["labels"]["kubegang.io/job-uid"] == "uid-train"
        assert meta["labels"]["kubegang.io/replica-index"] == str(i)
        assert meta["labels"]["app"] == "trainer"
        assert meta["annotations"] == {"kubegang.io/node": f"node-{i}", "kubegang.io/gpus": "0,1"}
        assert spec["schedulerName"] == "kubegang"
        assert spec["restartPolicy"] == "Never"
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [f"node-{i}"]}]}]
        owner = meta["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
            "GPUJob",
            "uid-train",
            True,
            True,
        )
    assert gang.service is None and gang.config_map is None


def test_pin_is_added_to_every_user_affinity_term(job_body: Any) -> None:
    body = job_body(replicas=1)
    user_term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    body["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [user_term]}}
    }
    pod = build_gang(job_view(body), placement(1)).pods[0]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 1
    assert terms[0]["matchExpressions"] == user_term["matchExpressions"]
    assert terms[0]["matchFields"][0]["values"] == ["node-0"]
    # The template itself is untouched: the next pod must not inherit node-0's pin.
    assert "matchFields" not in user_term


def test_torchrun_env_and_headless_service(job_body: Any) -> None:
    job = job_view(job_body(replicas=4, gpus=8, framework="torchrun"))
    gang = build_gang(job, placement(4))
    for i, pod in enumerate(gang.pods):
        env = env_of(pod)
        assert env["MASTER_ADDR"] == "train-0.train.team-a.svc"
        assert env["WORLD_SIZE"] == "4" and env["NNODES"] == "4"
        assert env["RANK"] == str(i) and env["NODE_RANK"] == str(i)
        assert env["NPROC_PER_NODE"] == "8"
        assert env["USER_VAR"] == "1"
        assert pod["spec"]["hostname"] == f"train-{i}" and pod["spec"]["subdomain"] == "train"
    assert gang.service is not None
    assert gang.service["metadata"]["name"] == "train"
    assert gang.service["spec"]["clusterIP"] == "None"
    assert gang.service["spec"]["publishNotReadyAddresses"] is True
    assert gang.service["spec"]["selector"]["kubegang.io/job-name"] == "train"


def test_mpi_hostfile_lists_each_pod_with_gpu_slots(job_body: Any) -> None:
    job = job_view(job_body(replicas=2, gpus=4, framework="mpi"))
    gang = build_gang(job, placement(2))
    assert mpi_hostfile(job) == "train-0.train.team-a.svc slots=4\ntrain-1.train.team-a.svc slots=4\n"
    assert gang.config_map is not None and gang.config_map["data"]["hostfile"] == mpi_hostfile(job)
    pod = gang.pods[1]
    assert env_of(pod)["OMPI_MCA_orte_default_hostfile"] == "/etc/kubegang/mpi/hostfile"
    assert pod["spec"]["volumes"][-1]["configMap"]["name"] == "train-hostfile"
    assert gang.service is not None


def test_placement_must_cover_every_replica(job_body: Any) -> None:
    with pytest.raises(ValueError, match="covers replicas"):
        build_gang(job_view(job_body(replicas=3)), placement(2))


def _without_template_gpus(body: dict[str, Any]) -> dict[str, Any]:
    del body["spec"]["template"]["spec"]["containers"][0]["resources"]
    return body


def test_gpus_per_replica_becomes_every_pods_gpu_limit_and_request(job_body: Any) -> None:
    """The issue: an MPI job with gpusPerReplica: 8 ran with `resources: {}` (no GPUs on a real node)."""
    job = job_view(_without_template_gpus(job_body(replicas=2, gpusPerReplica=8, framework="mpi")))
    gang = build_gang(job, Placement(pods=[ReplicaPlacement(index=i, node=f"node-{i}", gpus=list(range(8)))
                                           for i in range(2)]))
    for pod in gang.pods:
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == 8 and resources["requests"]["nvidia.com/gpu"] == 8
        assert pod_spec_requests(pod["spec"]).gpus == job.gpus_per_replica == 8
    assert mpi_hostfile(job).count("slots=8") == 2


def test_a_shared_gpu_pod_carries_its_gpu_and_share_but_no_whole_gpu(job_body: Any) -> None:
    job = job_view(_without_template_gpus(job_body(replicas=1, gpuFraction=250)))
    one = Placement(pods=[ReplicaPlacement(index=0, node="node-0", gpus=[3], gpu_milli=250)])
    pod = build_gang(job, one).pods[0]
    assert pod["metadata"]["annotations"] == {
        "kubegang.io/node": "node-0", "kubegang.io/gpus": "3", "kubegang.io/gpu-milli": "250"}
    assert pod_spec_requests(pod["spec"]).gpus == 0
    assert env_of(pod)["NVIDIA_VISIBLE_DEVICES"] == "3"
    shared = build_gang(job, one, shared_gpu_resource="nvidia.com/gpu.shared").pods[0]
    assert shared["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu.shared": 1}


def test_a_shared_gpu_pods_init_containers_see_only_its_gpu_too(job_body: Any) -> None:
    """docs/sharing.md: every container, init containers included. One built on a CUDA image carries the
    image's NVIDIA_VISIBLE_DEVICES=all, and would see every GPU of the node if the pod did not override it."""
    body = _without_template_gpus(job_body(replicas=1, gpuFraction=250))
    body["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "warm-cache", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
         "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "KEEP", "value": "1"}]}]
    one = Placement(pods=[ReplicaPlacement(index=0, node="node-0", gpus=[3], gpu_milli=250)])
    pod = build_gang(job_view(body), one, shared_gpu_resource="nvidia.com/gpu.shared").pods[0]
    (init,) = pod["spec"]["initContainers"]
    env = {e["name"]: e["value"] for e in init["env"]}
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["KUBEGANG_GPU_MILLI"], env["KEEP"]) == ("3", "250", "1")
    assert [e["name"] for e in init["env"]].count("NVIDIA_VISIBLE_DEVICES") == 1  # replaced, not added twice
    app = env_of(pod)
    assert (app["NVIDIA_VISIBLE_DEVICES"], app["KUBEGANG_GPU_MILLI"]) == ("3", "250")  # the same values
    assert "resources" not in init  # the shared resource is the first app container's, once per pod
