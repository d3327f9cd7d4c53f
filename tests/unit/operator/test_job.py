from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def _valid_jobs() -> list[Any]:
    """Every valid GPUJob of the validation table and of examples/ (the shapes a user writes)."""
    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("kubegang_api_cases_job", root / "tests/unit/api/cases.py")
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cases  # its dataclass looks its module up while being built
    spec.loader.exec_module(cases)
    bodies = [c.manifest for c in cases.load("valid")]
    for path in sorted((root / "examples").rglob("*.yaml")):
        bodies += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    jobs = [b for b in bodies if b.get("kind") == "GPUJob"]
    for i, body in enumerate(jobs):
        body.setdefault("metadata", {}).setdefault("namespace", "ns")
        body["metadata"]["uid"] = f"uid-{i}"
    return jobs


def test_the_views_gpu_count_is_the_specs_own_rule() -> None:
    """``JobView.gpu_milli_per_replica`` and ``requested_gpus`` reuse the count the view made once; they
    must say what ``GPUJobSpec`` says for every job shape (whole GPUs by limit or by gpusPerReplica, a
    share of one GPU, init containers and sidecars, CPU-only)."""
    jobs = _valid_jobs()
    seen = set()
    for body in jobs:
        view = job_view(body)
        assert view.gpu_milli_per_replica == view.spec.gpu_milli_per_replica(), body["metadata"]
        assert view.requested_gpus == view.spec.total_gpus(), body["metadata"]
        seen.add(view.gpu_milli_per_replica)
    assert len(jobs) >= 10 and len(seen) >= 3, (len(jobs), seen)  # whole, shared and several counts


def test_the_views_placement_and_attempt_are_read_once_and_a_new_status_is_a_new_view(job_body: Any) -> None:
    body = job_body(replicas=1, gpus=8)
    body["status"] = {"placement": {"domain": "su-1", "pods": [{"index": 0, "node": "n1", "gpus": [0]}]},
                      "admittedAt": "2026-12-07T10:00:00.123Z"}
    view = job_view(body)
    assert view.placement is view.placement and view.placement is not None
    assert view.placement.domain == "su-1" and view.attempt == "20261207T100000123Z"
    moved = dataclasses.replace(view, status={"placement": {"domain": "su-2", "pods": [{"index": 0, "node": "n2"}]},
                                              "admittedAt": "2026-12-07T11:00:00.000Z"})
    assert moved.placement is not None and moved.placement.domain == "su-2"
    assert moved.attempt == "20261207T110000000Z"
    assert view.placement.domain == "su-1" and view.attempt == "20261207T100000123Z"
    assert dataclasses.replace(view, status={}).attempt == "none"
