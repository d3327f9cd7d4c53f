"""Wire compatibility with k8s.io/kube-scheduler/extender/v1: Go field names in and out."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from kubegang.extender._pods import DemandError, parse_gpu_indices, pod_demand
from kubegang.extender._wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    MetaPod,
    MetaVictims,
)

POD = {
    "metadata": {
        "name": "w-0", "namespace": "team-a", "uid": "u-0",
        "labels": {"kubegang.io/job-uid": "job-1"},
        "annotations": {"kubegang.io/node": "n1", "kubegang.io/gpus": "0,1"},
        "resourceVersion": "42",
    },
    "spec": {
        "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}},
            {"name": "side", "resources": {"requests": {"nvidia.com/gpu": 1}}},
        ],
        "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        "schedulerName": "kubegang",
    },
    "status": {"phase": "Pending"},
}


def test_extender_args_reads_go_field_names() -> None:
    args = ExtenderArgs.from_wire(json.dumps({"Pod": POD, "NodeNames": ["n1", "n2"]}))
    assert args.candidate_names() == ["n1", "n2"]
    assert args.pod.metadata.annotations["kubegang.io/node"] == "n1"


def test_extender_args_from_node_list_when_not_cache_capable() -> None:
    args = ExtenderArgs.model_validate(
        {"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}}
    )
    assert args.node_names is None
    assert args.candidate_names() == ["a", "b"]


def test_pod_round_trips_unknown_fields() -> None:
    args = ExtenderArgs.model_validate({"Pod": POD, "NodeNames": []})
    wire = args.to_wire()
    assert set(wire) == {"Pod", "NodeNames"}
    assert wire["Pod"]["status"] == {"phase": "Pending"}
    assert wire["Pod"]["metadata"]["resourceVersion"] == "42"
    assert wire["Pod"]["spec"]["initContainers"][0]["name"] == "i"


def test_snake_case_keys_are_not_the_wire_format() -> None:
    with pytest.raises(ValidationError, match="Pod"):
        ExtenderArgs.from_wire(json.dumps({"pod": POD, "node_names": ["n1"]}))


def test_filter_result_uses_pascal_case() -> None:
    result = ExtenderFilterResult(node_names=["n1"], failed_nodes={"n2": "full"},
                                  failed_and_unresolvable_nodes={"n3": "pinned"})
    assert result.to_wire() == {
        "NodeNames": ["n1"], "FailedNodes": {"n2": "full"},
        "FailedAndUnresolvableNodes": {"n3": "pinned"}, "Error": "",
    }
    assert ExtenderFilterResult.model_validate(result.to_wire()) == result


def test_host_priority_bounds() -> None:
    assert HostPriority(host="n", score=10).to_wire() == {"Host": "n", "Score": 10}
    with pytest.raises(ValidationError):
        HostPriority(host="n", score=11)
    with pytest.raises(ValidationError):
        HostPriority(host="n", score=-1)


def test_binding_args_shape() -> None:
    wire = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"}
    assert ExtenderBindingArgs.model_validate(wire).to_wire() == wire


def test_preemption_meta_and_full_victims_agree() -> None:
    meta = ExtenderPreemptionArgs.model_validate(
        {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 1}}}
    )
    full = ExtenderPreemptionArgs.model_validate(
        {"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {"uid": "v1"}}],
                                                  "NumPDBViolations": 1}}}
    )
    assert meta.meta_victims() == full.meta_victims()
    result = ExtenderPreemptionResult(node_name_to_meta_victims=meta.meta_victims())
    assert result.to_wire() == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v1"}],
                                                                 "NumPDBViolations": 1}}}


@given(
    names=st.lists(st.text(min_size=1, max_size=20), max_size=30),
    failed=st.dictionaries(st.text(max_size=10), st.text(max_size=30), max_size=10),
    uids=st.lists(st.text(max_size=12), max_size=10),
)
def test_round_trip_property(names: list[str], failed: dict[str, str], uids: list[str]) -> None:
    result = ExtenderFilterResult(node_names=names, failed_nodes=failed)
    assert ExtenderFilterResult.model_validate_json(json.dumps(result.to_wire())) == result
    victims = MetaVictims(pods=[MetaPod(uid=u) for u in uids], num_pdb_violations=len(uids))
    assert MetaVictims.model_validate_json(json.dumps(victims.to_wire())) == victims


def test_pod_demand_counts_gpus_and_reads_the_pin() -> None:
    demand = pod_demand(ExtenderArgs.model_validate({"Pod": POD}).pod)
    assert demand.gpus == 4  # max(2 + 1 in containers, 4 in the init container)
    assert demand.pinned_node == "n1"
    assert demand.pinned_gpus == (0, 1)
    assert demand.job_uid == "job-1"
    assert demand.key == "team-a/w-0"


def test_pod_demand_counts_a_native_sidecar_beside_the_app_containers() -> None:
    """The wire model keeps an init container's restartPolicy, so the extender counts a sidecar as
    kube-scheduler does (KEP-753): 8 + 1 GPUs, 4 + 2 CPUs."""
    pod = {"spec": {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": "4"}}}],
        "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                            "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "2"}}}]}}
    demand = pod_demand(ExtenderArgs.model_validate({"Pod": pod}).pod)
    assert (demand.gpus, demand.cpu_milli) == (9, 6000)


@pytest.mark.parametrize("bad", ["1.5", "two", "-1", "500m"])
def test_pod_demand_rejects_non_integer_gpus_naming_the_field(bad: str) -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": bad}}}]}}
    with pytest.raises(DemandError, match=r"spec\.containers\[0\]\.resources"):
        pod_demand(ExtenderArgs.model_validate({"Pod": pod}).pod)


def test_gpu_indices() -> None:
    assert parse_gpu_indices("") == ()
    assert parse_gpu_indices(" 3, 1 ") == (3, 1)
    with pytest.raises(DemandError, match=r"kubegang\.io/gpus"):
        parse_gpu_indices("0,x")
    with pytest.raises(DemandError, match="repeated"):
        parse_gpu_indices("1,1")
