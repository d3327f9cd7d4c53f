"""The end-to-end benchmark's Kueue half and gang figures (bench/e2e/_kueue.py, _gangs.py, _report.py):
the objects and annotations it gives Kueue, and the rules that judge every half's gangs."""

from __future__ import annotations

from typing import Any

import pytest

from bench.e2e import _report as report
from bench.e2e._gangs import PodTrace, _time_mean, gang_report, node_domains
from bench.e2e._kueue import (
    HOSTNAME,
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    job_manifest,
    kueue_objects,
    topology_annotations,
    topology_levels,
)
from bench.e2e._workload import JOB_LABEL, MAX_FILL, BenchJob, generate, leaf_share, mean_gpus_per_job
from kubegang.api import Topology
from kubegang.levels import Level

FABRIC = {"kubegang.io/block": "b0", "kubegang.io/spine": "s0"}


def _node(name: str, leaf: str | None, gpu: bool = True) -> dict[str, Any]:
    labels = {**FABRIC, "kubernetes.io/hostname": name}
    if leaf:
        labels["kubegang.io/leaf"] = leaf
    if gpu:
        labels["nvidia.com/gpu.present"] = "true"
    return {"metadata": {"name": name, "labels": labels}}


NODES = [_node("n1", "leaf-a"), _node("n2", "leaf-a"), _node("n3", "leaf-b"), _node("cpu", None, gpu=False)]


def test_topology_levels_are_the_labels_every_gpu_node_carries_widest_first_then_the_hostname() -> None:
    assert [key for _, key in topology_levels(NODES)] == [
        "kubegang.io/block", "kubegang.io/spine", "kubegang.io/leaf", HOSTNAME]
    # One GPU node without a leaf label: Kueue would leave it out of TAS, so the level goes.
    partial = [*NODES, _node("n4", None)]
    assert [lv for lv, _ in topology_levels(partial)] == [Level.BLOCK, Level.SPINE, Level.NODE]
    with pytest.raises(ValueError, match="no GPU node"):
        topology_levels([_node("cpu", None, gpu=False)])


def test_topology_annotations_mirror_the_gpujob_topology() -> None:
    levels = topology_levels(NODES)
    # kubegang's default (narrowest domain first, widening to the cluster) is Kueue's preferred hostname.
    assert topology_annotations(Topology(), levels) == {PREFERRED_TOPOLOGY: HOSTNAME}
    assert topology_annotations(Topology(required="leaf"), levels) == {REQUIRED_TOPOLOGY: "kubegang.io/leaf"}
    assert topology_annotations(Topology(preferred="spine"), levels) == {PREFERRED_TOPOLOGY: "kubegang.io/spine"}
    # No NVLink label on these nodes: each node is its own NVLink domain, so NVLink is the hostname.
    assert topology_annotations(Topology(required="nvlink"), levels) == {REQUIRED_TOPOLOGY: HOSTNAME}
    assert topology_annotations(Topology(required="cluster"), levels) == {}
    assert topology_annotations(Topology(required="block", preferred="leaf"), levels) == {
        REQUIRED_TOPOLOGY: "kubegang.io/block"}


def test_kueue_objects_are_the_gpuqueue_tree_with_topology_aware_scheduling() -> None:
    leaves = ["l0", "l1", "l2"]
    docs = kueue_objects(leaves, 100, "ns", topology_levels(NODES))
    kinds = [d["kind"] for d in docs]
    assert kinds[:3] == ["Topology", "ResourceFlavor", "Cohort"]
    assert kinds.count("ClusterQueue") == kinds.count("LocalQueue") == 3
    flavor = docs[1]["spec"]
    assert flavor["topologyName"] == docs[0]["metadata"]["name"]
    assert flavor["nodeLabels"] == {"nvidia.com/gpu.present": "true"}
    for cq in (d for d in docs if d["kind"] == "ClusterQueue"):
        assert cq["spec"]["cohortName"] == docs[2]["metadata"]["name"]
        quota = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
        assert quota == {"name": "nvidia.com/gpu", "nominalQuota": leaf_share(100, leaves)} == {
            "name": "nvidia.com/gpu", "nominalQuota": 34}
    assert {(d["metadata"]["namespace"], d["spec"]["clusterQueue"]) for d in docs if d["kind"] == "LocalQueue"} == {
        ("ns", leaf) for leaf in leaves}


def test_a_job_is_one_batch_job_admitted_whole() -> None:
    job = BenchJob("job-00007", "l1", pods=4, gpus_per_pod=2, runtime_s=30)
    manifest = job_manifest(job, "ns", {PREFERRED_TOPOLOGY: HOSTNAME})
    spec = manifest["spec"]
    assert spec["parallelism"] == spec["completions"] == 4
    assert manifest["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "l1"}
    template = spec["template"]
    assert template["metadata"]["labels"] == {JOB_LABEL: "job-00007"}
    assert template["metadata"]["annotations"] == {PREFERRED_TOPOLOGY: HOSTNAME, "kubegang.io/fake-runtime": "30s"}
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert "suspend" not in spec, "suspending a queued Job is Kueue's webhook's job"


def test_a_contended_burst_asks_for_more_than_the_cluster_and_its_jobs_finish() -> None:
    capacity = 1024
    n = round(1.5 * capacity / mean_gpus_per_job())
    jobs = generate(n, 1, capacity, 1.5, ["l0"], runtime_s=30)
    assert capacity < sum(j.gpus for j in jobs) <= 1.5 * capacity
    assert {j.runtime_s for j in jobs} == {30}
    assert mean_gpus_per_job() == pytest.approx(3.36)
    with pytest.raises(ValueError, match="fill must be in"):
        generate(10, 1, capacity, MAX_FILL + 0.1, ["l0"])
    with pytest.raises(ValueError, match="runtime_s"):
        generate(10, 1, capacity, 0.5, ["l0"], runtime_s=0)


def test_time_mean_of_a_step_function() -> None:
    # 0 until 1, 4 until 3, 2 until 5: over [0, 5] that is (0 + 8 + 4) / 5.
    assert _time_mean([(1, 4), (3, -2)], 0, 5) == pytest.approx(12 / 5)
    assert _time_mean([(1, 4)], 2, 2) is None


def test_gang_report_judges_leaf_nvlink_partial_and_allocation() -> None:
    jobs = [BenchJob("a", "q", 2, 1), BenchJob("b", "q", 3, 2), BenchJob("c", "q", 1, 4)]
    traces = [
        PodTrace("a", 1, "n1", 1.0, None), PodTrace("a", 1, "n2", 2.0, None),     # whole in 1 s, one leaf, 2 nodes
        PodTrace("b", 2, "n1", 1.0, 6.0), PodTrace("b", 2, "n3", 9.0, None),     # never whole: partial at the end
        PodTrace("b", 2, None, None, None),
        PodTrace("c", 4, "n3", 0.0, None),                                        # single pods are never gangs
        PodTrace("other", 8, "n1", 0.0, None),
    ]
    domains = node_domains(NODES)
    assert domains["n1"][Level.LEAF] == domains["n2"][Level.LEAF] != domains["n3"][Level.LEAF]
    assert domains["n1"][Level.NVLINK] != domains["n2"][Level.NVLINK]
    got = gang_report([t for t in traces if t.job != "other"], jobs, 10, domains, end=10.0)
    assert got["multi_pod_gangs"] == 2 and got["whole_gangs"] == 1
    assert got["share_in_one_leaf"] == 1.0 and got["share_in_one_nvlink_domain"] == 0.0
    assert got["partial_gangs"] == got["partial_gangs_at_end"] == 1
    assert got["longest_partial_s"] == 9.0
    # Not every job became whole, so the window runs from the first bind (0) to the end (10).
    assert got["waiting_window_s"] == 10.0
    allocated = 4 * 10 + 1 * 9 + 1 * 8 + 2 * 5 + 2 * 1    # c, a's pods, b's first (1..6) and second (9..10)
    assert got["gpu_allocation_while_waiting"] == pytest.approx(allocated / 10 / 10)
    held = 1 * 1 + 2 * 5 + 2 * 1                           # a's first pod until a was whole; b's pods throughout
    assert got["gpus_held_by_incomplete_gangs"] == pytest.approx(held / 10 / 10)


def test_a_gang_bound_within_the_grace_is_not_partial() -> None:
    jobs = [BenchJob("a", "q", 2, 1)]
    quick = gang_report([PodTrace("a", 1, "n1", 1.0), PodTrace("a", 1, "n1", 5.9)], jobs, 8, node_domains(NODES), 9)
    slow = gang_report([PodTrace("a", 1, "n1", 1.0), PodTrace("a", 1, "n1", 6.1)], jobs, 8, node_domains(NODES), 9)
    assert (quick["partial_gangs"], slow["partial_gangs"]) == (0, 1)
    assert quick["share_in_one_nvlink_domain"] == 1.0


def test_the_report_says_where_kueue_is_ahead() -> None:
    def half(admitted: float, running: float) -> dict[str, Any]:
        return {"jobs_admitted": {"overall_per_s": admitted}, "time_until_all_running_s": running,
                "processes": {"a": {"cpu_seconds": 2.0, "peak_rss_mib": 10.0},
                              "a.supervisor": {"cpu_seconds": 5.0, "peak_rss_mib": 1.0}}}

    out = {"kubegang": half(50.0, 20.0), "kueue": half(60.0, 30.0), "plain": {"time_until_all_running_s": 5.0}}
    rows = dict(report.comparison_rows(out))
    assert rows["time until all Running (s)"] == [20.0, 30.0, 5.0]
    assert rows["CPU seconds, all processes"] == [2.0, 2.0, None]
    ahead = report.kueue_ahead(out)
    assert len(ahead) == 1 and ahead[0].startswith("jobs admitted / s: Kueue 60.00, kubegang 50.00 (")
    assert rows["CPU seconds, the system's own processes"] == [0.0, 0.0, None]
    assert "| jobs admitted / s | 50.00 | 60.00 | – |" in report.three_way_table(out)
