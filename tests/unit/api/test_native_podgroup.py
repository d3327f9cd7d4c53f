"""What Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2) says about the gang kubegang admits, and a
clear error naming the field for what it cannot use."""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.api import (
    PodSourceKind,
    SourceError,
    job_name_of,
    native_pod_group,
    scheduling_group_name,
    selected_source,
    source_job_name,
    source_selector,
    workload_name,
)


def podgroup(policy: Any = None, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             workload: str | None = "trainer") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 4}} if policy is None else policy}
    if workload:
        spec["podGroupTemplateRef"] = {"workload": {"workloadName": workload, "podGroupTemplateName": "workers"}}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "team-a", "labels": labels or {}, "annotations": annotations or {}},
            "spec": spec}


def workload_object(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
                    ) -> dict[str, Any]:
    return {"metadata": {"name": "trainer", "labels": labels or {}, "annotations": annotations or {}}}


def test_size_from_min_count_and_queue_from_the_podgroup_first() -> None:
    gang = native_pod_group(podgroup(labels={"kubegang.io/queue": "a"}, annotations={
        "kubegang.io/topology-required": "leaf"}), workload_object({"kubegang.io/queue": "b"}),
        {"kubegang.io/queue": "c"})
    assert (gang.name, gang.size, gang.queue, gang.topology.required) == ("pg", 4, "a", "leaf")


def test_queue_and_topology_from_the_workload_then_the_pods() -> None:
    gang = native_pod_group(podgroup(), workload_object({"kubegang.io/queue": "b"}, {
        "kubegang.io/topology-required": "nvlink"}), {"kubegang.io/queue": "c"})
    assert (gang.queue, gang.topology.required) == ("b", "nvlink")
    assert native_pod_group(podgroup(), None, {"kubegang.io/queue": "c"}).queue == "c"


@pytest.mark.parametrize(("group", "named"), [
    (podgroup({"basic": {}}), "spec.schedulingPolicy.gang: required"),
    (podgroup({}), "spec.schedulingPolicy.gang: required"),
    (podgroup({"gang": {"minCount": 0}}), "spec.schedulingPolicy.gang.minCount"),
    (podgroup({"gang": {"minCount": "4"}}), "spec.schedulingPolicy.gang.minCount"),
    (podgroup({"gang": {"minCount": True}}), "spec.schedulingPolicy.gang.minCount"),
    (podgroup({"gang": {}}), "spec.schedulingPolicy.gang.minCount"),
    (podgroup({"gang": {"minCount": 10_001}}), "spec.schedulingPolicy.gang.minCount"),
    (podgroup(annotations={"kubegang.io/topology-required": "rack"}),
     "metadata.annotations[kubegang.io/topology-required]"),
])
def test_what_cannot_be_used_is_named(group: dict[str, Any], named: str) -> None:
    with pytest.raises(SourceError) as exc:
        native_pod_group(group, None, {"kubegang.io/queue": "q"})
    assert str(exc.value).startswith(named)


def test_a_basic_policy_says_what_it_got_and_what_to_do() -> None:
    with pytest.raises(SourceError, match=r"got basic\).*set gang\.minCount, or remove spec\.schedulingGroup"):
        native_pod_group(podgroup({"basic": {}}), None, {"kubegang.io/queue": "q"})


def test_no_queue_anywhere_names_the_label_and_the_three_places() -> None:
    with pytest.raises(SourceError) as exc:
        native_pod_group(podgroup(), workload_object(), {})
    assert str(exc.value).startswith("metadata.labels[kubegang.io/queue]: required on PodGroup 'pg', its Workload "
                                     "or its pods")


def test_the_pod_field_and_the_workload_reference_are_read_defensively() -> None:
    assert scheduling_group_name({"schedulingGroup": {"podGroupName": "pg"}}) == "pg"
    for spec in ({}, {"schedulingGroup": None}, {"schedulingGroup": {}}, {"schedulingGroup": {"podGroupName": ""}},
                 {"schedulingGroup": "pg"}, {"schedulingGroup": {"podGroupName": 3}}):
        assert scheduling_group_name(spec) is None
    assert workload_name(podgroup()) == "trainer"
    assert workload_name(podgroup(workload=None)) is None
    assert workload_name({"spec": {"podGroupTemplateRef": {"workload": None}}}) is None


def test_a_pod_naming_a_podgroup_selects_it_unless_it_carries_kubegangs_own_group_label() -> None:
    assert selected_source({}, "pg") == (PodSourceKind.SCHEDULING_GROUP, "pg")
    assert selected_source({"ray.io/cluster": "rc"}, "pg") == (PodSourceKind.SCHEDULING_GROUP, "pg")
    assert selected_source({"kubegang.io/pod-group": "g"}, "pg") == (PodSourceKind.POD_GROUP, "g")
    assert selected_source({}, None) is None


def test_its_gpujob_name_and_how_a_user_names_it() -> None:
    assert source_job_name(PodSourceKind.SCHEDULING_GROUP, "pg") == "schedulinggroup-pg"
    assert job_name_of("schedulinggroup/pg") == "schedulinggroup-pg" == job_name_of("schedulinggroups/pg")
    with pytest.raises(ValueError, match=r"spec\.schedulingGroup, not by labels"):
        source_selector(PodSourceKind.SCHEDULING_GROUP, "pg")


def test_a_preferred_topology_comes_from_the_podgroup_else_the_workload() -> None:
    workload = workload_object(annotations={"kubegang.io/topology-preferred": "leaf"})
    own = native_pod_group(podgroup(annotations={"kubegang.io/topology-preferred": "nvlink"}), workload,
                           {"kubegang.io/queue": "q"})
    assert (own.topology.required, own.topology.preferred) == (None, "nvlink")
    inherited = native_pod_group(podgroup(), workload_object(annotations={"kubegang.io/topology-preferred": "leaf"}),
                                 {"kubegang.io/queue": "q"})
    assert inherited.topology.preferred == "leaf"
