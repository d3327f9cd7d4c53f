"""The one rule for what a pod asks: kube-scheduler's, native sidecars (KEP-753) included."""

from __future__ import annotations

import pytest

from kubegang.api import GPUJob, PodRequests, RequestError, pod_requests, pod_spec_requests


def _c(**resources: object) -> dict[str, object]:
    return {"name": "c", "resources": resources}


def _sidecar(**resources: object) -> dict[str, object]:
    """An init container with ``restartPolicy: Always``: it keeps running beside the app containers."""
    return {**_c(**resources), "restartPolicy": "Always"}


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


def test_a_native_sidecar_counts_beside_the_app_containers() -> None:
    """KEP-753: a sidecar keeps running, so kube-scheduler adds it to the app containers (9 GPUs, not 8)."""
    spec = {
        "containers": [_c(limits={"nvidia.com/gpu": 8}, requests={"cpu": 4})],
        "initContainers": [_sidecar(limits={"nvidia.com/gpu": 1}, requests={"cpu": 2})],
    }
    assert pod_spec_requests(spec) == PodRequests(gpus=9, cpu_milli=6000, memory_mib=0)


def test_an_ordinary_init_container_counts_only_the_sidecars_started_before_it() -> None:
    """The big init container runs before the sidecar starts: its term is 10 GPUs, not 10 + 1."""
    spec = {
        "containers": [_c(limits={"nvidia.com/gpu": 2}, requests={"cpu": "1", "memory": "1Gi"})],
        "initContainers": [_c(limits={"nvidia.com/gpu": 10}, requests={"cpu": "3", "memory": "4Gi"}),
                           _sidecar(limits={"nvidia.com/gpu": 1}, requests={"cpu": "2500m", "memory": "1Gi"})],
    }
    # GPUs: max(2 + 1, 10) = 10; CPU: max(1000 + 2500, 3000) = 3500m; memory: max(1 + 1, 4) = 4Gi.
    assert pod_spec_requests(spec) == PodRequests(gpus=10, cpu_milli=3500, memory_mib=4096)


def test_an_init_container_between_two_sidecars_runs_beside_the_first_only() -> None:
    spec = {
        "containers": [_c(limits={"nvidia.com/gpu": 1}, requests={"cpu": "1"})],
        "initContainers": [_sidecar(limits={"nvidia.com/gpu": 1}, requests={"cpu": "500m"}),
                           _c(limits={"nvidia.com/gpu": 6}, requests={"cpu": "3"}),
                           _sidecar(limits={"nvidia.com/gpu": 2}, requests={"cpu": "250m"})],
    }
    # GPUs: max(1 + 1 + 2 app and sidecars, 1 + 6 for the init container) = 7.
    # CPU: max(1000 + 500 + 250 app and sidecars, 500 + 3000 for the init container) = 3500m.
    assert pod_spec_requests(spec) == PodRequests(gpus=7, cpu_milli=3500, memory_mib=0)
    spec["initContainers"][1] = _c(limits={"nvidia.com/gpu": 1}, requests={"cpu": "100m"})
    # Now the app containers and both sidecars are the most: 1 + 1 + 2 GPUs, 1000 + 500 + 250m CPU.
    assert pod_spec_requests(spec) == PodRequests(gpus=4, cpu_milli=1750, memory_mib=0)


@pytest.mark.parametrize("policy", [None, "OnFailure", "Never", "always"])
def test_without_sidecars_the_largest_init_container_or_the_sum_counts_as_before(policy: str | None) -> None:
    init = [_c(limits={"nvidia.com/gpu": 3}, requests={"cpu": "2"}), _c(limits={"nvidia.com/gpu": 5})]
    if policy is not None:
        init = [{**c, "restartPolicy": policy} for c in init]
    spec = {"containers": [_c(limits={"nvidia.com/gpu": 4}, requests={"cpu": "1"})], "initContainers": init}
    assert pod_spec_requests(spec) == PodRequests(gpus=5, cpu_milli=2000, memory_mib=0)


def test_pod_requests_reads_a_restart_policy_given_with_an_init_container_and_still_takes_pairs() -> None:
    """The extender hands over ``(requests, limits, restartPolicy)``; a plain pair is an ordinary one."""
    app = [({"cpu": "1"}, {"nvidia.com/gpu": 8})]
    assert pod_requests(app, [({}, {"nvidia.com/gpu": 1}, "Always")]) == PodRequests(gpus=9, cpu_milli=1000)
    assert pod_requests(app, [({}, {"nvidia.com/gpu": 1})]) == PodRequests(gpus=8, cpu_milli=1000)
