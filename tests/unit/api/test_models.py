"""The models as the core and the operator use them: defaults, GPU accounting, wire form, parsing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pydantic import ValidationError

from kubegang.api import (
    GPUJob,
    GPUJobSpec,
    GPUJobStatus,
    GPUQueue,
    JobPhase,
    Placement,
    ReplicaPlacement,
    UnknownKindError,
    parse_manifest,
)


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubegang.io/v1alpha1",
        "kind": "GPUJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"queue": "q", **spec},
    }


def _containers(*limits: dict[str, Any] | None) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", **({"resources": {"limits": lim}} if lim is not None else {})} for i, lim in enumerate(limits)
    ]
    return {"spec": {"containers": containers}}


def test_spec_defaults_match_the_documented_ones() -> None:
    job = parse_manifest(_job({"template": _containers(None)}))
    assert isinstance(job, GPUJob)
    spec = job.spec
    assert (spec.replicas, spec.restart_limit, spec.gang_timeout_seconds) == (1, 3, 300)
    assert (spec.framework, spec.suspend, spec.ttl_seconds_after_finished) == ("none", False, None)
    assert spec.topology.required is None and spec.topology.preferred is None


@pytest.mark.parametrize(
    ("spec", "whole", "milli", "total"),
    [
        ({"replicas": 4, "template": _containers({"nvidia.com/gpu": 8})}, 8, 8000, 32.0),
        ({"replicas": 2, "template": _containers({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": 1})}, 3, 3000, 6.0),
        ({"replicas": 3, "template": _containers({"cpu": "1"}), "gpusPerReplica": 4}, 4, 4000, 12.0),
        ({"template": _containers(None), "gpuFraction": 250}, 0, 250, 0.25),
        ({"replicas": 5, "template": _containers(None)}, 0, 0, 0.0),
        ({"template": _containers({"nvidia.com/gpu": "2k"})}, 2000, 2_000_000, 2000.0),
    ],
    ids=["template-limit", "two-containers", "gpusPerReplica", "fraction", "cpu-only", "suffix"],
)
def test_gpu_accounting(spec: dict[str, Any], whole: int, milli: int, total: float) -> None:
    job = parse_manifest(_job(spec))
    assert isinstance(job, GPUJob)
    assert job.spec.whole_gpus_per_replica() == whole
    assert job.spec.gpu_milli_per_replica() == milli
    assert job.spec.total_gpus() == total


def test_wire_form_is_camel_case_without_unset_fields() -> None:
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    status = GPUJobStatus(
        phase=JobPhase.RUNNING,
        total_gpus=16,
        ready_replicas=2,
        placement=Placement(domain="leaf-1", pods=[ReplicaPlacement(index=0, node="n1", gpus=[0, 1])]),
        started_at=now,
    )
    assert status.to_dict() == {
        "phase": "Running",
        "conditions": [],
        "readyReplicas": 2,
        "totalGPUs": 16.0,
        "placement": {"domain": "leaf-1", "pods": [{"index": 0, "node": "n1", "gpus": [0, 1]}]},
        "excludedNodes": [],
        "startedAt": "2026-01-02T03:04:05Z",
    }


def test_python_names_build_models_but_manifests_need_wire_names() -> None:
    spec = GPUJobSpec(queue="q", template=_containers(None), gpus_per_replica=2)
    assert spec.to_dict()["gpusPerReplica"] == 2
    with pytest.raises(ValidationError, match="gpus_per_replica"):
        parse_manifest(_job({"template": _containers(None), "gpus_per_replica": 2}))


def test_pod_template_keeps_fields_kubegang_does_not_read() -> None:
    template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "img", "env": [{"name": "A", "value": "1"}]}], "hostIPC": True},
    }
    job = parse_manifest(_job({"template": template}))
    assert isinstance(job, GPUJob)
    assert job.spec.template.as_dict() == template
    assert job.to_dict()["spec"]["template"] == template


def test_objects_read_back_from_the_api_server_parse() -> None:
    manifest = _job({"template": _containers(None)})
    manifest["metadata"].update(
        uid="8d3c", resourceVersion="42", generation=3, creationTimestamp="2026-01-02T03:04:05Z",
        managedFields=[{"manager": "kubectl", "operation": "Apply"}],
    )  # fmt: skip
    manifest["status"] = {
        "phase": "Queued",
        "conditions": [
            {"type": "Queued", "status": "True", "reason": "QuotaExhausted", "message": "m",
             "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 3}
        ],
    }  # fmt: skip
    job = parse_manifest(manifest)
    assert job.metadata.generation == 3
    assert isinstance(job, GPUJob) and job.status is not None
    assert job.status.conditions[0].last_transition_time == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def test_queue_defaults() -> None:
    queue = parse_manifest(
        {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "r"}, "spec": {}}
    )
    assert isinstance(queue, GPUQueue)
    assert queue.spec.weight == 1.0 and queue.spec.namespaces == [] and queue.spec.resources == []
    policy = queue.spec.preemption
    assert (policy.within_queue, policy.reclaim_from_borrowers, policy.borrow_within_parent) == ("Never",) * 3


def test_unknown_api_version_and_kind_are_refused_by_name() -> None:
    with pytest.raises(UnknownKindError, match=r"kubegang\.io/v1alpha1"):
        parse_manifest({**_job({"template": _containers(None)}), "apiVersion": "kubegang.io/v1"})
    with pytest.raises(UnknownKindError, match="GPUJob, GPUQueue"):
        parse_manifest({**_job({"template": _containers(None)}), "kind": "GPUCluster"})


def test_condition_reason_must_be_machine_readable() -> None:
    manifest = _job({"template": _containers(None)})
    manifest["status"] = {
        "conditions": [
            {"type": "Queued", "status": "True", "reason": "no quota", "lastTransitionTime": "2026-01-02T03:04:05Z"}
        ]
    }
    with pytest.raises(ValidationError, match=r"status\.conditions\.0\.reason"):
        parse_manifest(manifest)
