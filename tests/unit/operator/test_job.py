from __future__ import annotations

from typing import Any

import pytest

from kubegang.operator._job import JobSpecError, job_view


def test_view_reads_gpus_from_template_limit(job_body: Any) -> None:
    job = job_view(job_body(replicas=4, gpus=8))
    assert job.total_gpus == 32
    assert job.restart_limit == 3
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
