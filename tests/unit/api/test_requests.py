"""The one rule for what a pod asks: containers summed, or the largest init container when larger."""

from __future__ import annotations

import pytest

from kubegang.api import GPUJob, PodRequests, RequestError, pod_spec_requests


def _c(**resources: object) -> dict[str, object]:
    return {"name": "c", "resources": resources}


def test_containers_are_summed_and_a_larger_init_container_wins() -> None:
    spec = {
        "containers": [_c(limits={"nvidia.com/gpu": 2, "cpu": "500m"}), _c(requests={"cpu": 1, "memory": "1Gi"})],
        "initContainers": [_c(limits={"nvidia.com/gpu": "4", "memory": "3Gi"})],
    }
    assert pod_spec_requests(spec) == PodRequests(gpus=4, cpu_milli=1500, memory_mib=3072)


def test_a_request_wins_over_its_limit_and_quantities_round_up() -> None:
    spec = {"containers": [_c(requests={"cpu": "0.0001"}, limits={"cpu": "8"}), _c(limits={"memory": "1"})]}
    assert pod_spec_requests(spec) == PodRequests(gpus=0, cpu_milli=1, memory_mib=1)


@pytest.mark.parametrize("gpus", ["0.5", "1500m", -1])
def test_a_fractional_or_negative_gpu_count_names_the_field(gpus: object) -> None:
    with pytest.raises(RequestError, match=r"spec\.containers\[0\]\.resources\.limits\.nvidia\.com/gpu"):
        pod_spec_requests({"containers": [_c(limits={"nvidia.com/gpu": gpus})]})


@pytest.mark.parametrize(("resource", "value"), [("cpu", "1e30"), ("memory", "9E"), ("cpu", "1e999999999")])
def test_a_request_beyond_any_node_names_the_field(resource: str, value: str) -> None:
    with pytest.raises(RequestError, match=rf"spec\.containers\[1\]\.resources\.requests\.{resource}"):
        pod_spec_requests({"containers": [_c(), _c(requests={resource: value})]})


def test_the_api_model_counts_init_container_gpus_by_the_same_rule() -> None:
    """The model's GPUs per replica used to ignore init containers while the extender counted them."""
    job = GPUJob.model_validate({
        "apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob", "metadata": {"name": "j", "namespace": "n"},
        "spec": {"queue": "q", "template": {"spec": {
            "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}},
    })
    assert job.spec.whole_gpus_per_replica() == 2
