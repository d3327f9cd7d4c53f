from __future__ import annotations

from typing import Any

import pytest

from kubegang.operator._job import JobSpecError, job_view


def test_view_reads_gpus_from_template_limit(job_body: Any) -> None:
    job = job_view(job_body(replicas=4, gpus=8))
    assert job.total_gpus == 32
    assert job.spec.restart_limit == 3
    assert job.key == "team-a/train"


def test_gpus_per_replica_without_template_limit(job_body: Any) -> None:
    body = job_body(gpusPerReplica=2)
    del body["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert job_view(body).gpus_per_replica == 2


def test_gpu_count_given_twice_is_refused(job_body: Any) -> None:
    with pytest.raises(JobSpecError, match="give the GPU count in one place"):
        job_view(job_body(gpus=8, gpusPerReplica=2))


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("replicas", 0, "spec.replicas"),
        ("framework", "ray", "spec.framework"),
        ("restartLimit", -1, "spec.restartLimit"),
    ],
)
def test_bad_fields_are_named(job_body: Any, field: str, value: Any, named: str) -> None:
    body = job_body()
    body["spec"][field] = value
    with pytest.raises(JobSpecError, match=named):
        job_view(body)


def test_template_cpu_memory_and_tolerations_reach_the_gang_request(job_body: Any) -> None:
    from kubegang.operator._extender_placement import gang_request
    from kubegang.placement import Toleration

    body = job_body("t", replicas=2, gpus=8)
    spec = body["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8, "cpu": "4", "memory": "1Gi"}}
    spec["containers"].append(
        {"name": "side", "image": "s", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}
    )
    spec["initContainers"] = [{"name": "init", "image": "i", "resources": {"requests": {"cpu": "8"}}}]
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    gang = gang_request(job_view(body))
    assert (gang.cpu_milli, gang.memory_mib) == (8000, 1536)  # init container's 8 CPUs beat 4.5
    assert gang.tolerations == (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)


def test_a_bad_cpu_request_names_the_field(job_body: Any) -> None:
    body = job_body("t")
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "lots"}
    with pytest.raises(JobSpecError, match=r"containers\[0\]\.resources\.requests\.cpu"):
        job_view(body)
