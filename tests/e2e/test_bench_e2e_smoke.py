"""A tiny configuration of the end-to-end benchmark (bench/e2e): correctness, not speed.

20 GPUJobs in one burst through kubegang, then the same pods as plain pods, on the superpod shape.
Every job must start whole, every pod must run, and no node may hold more GPUs than it has, with
kubegang's pods on the nodes the extender planned for them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Protocol

import pytest

# bench/ is not an installed package: make the repository root importable (as tests/unit/bench does).
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)

from bench.e2e import _harness as harness  # noqa: E402
from bench.e2e._workload import describe, generate, leaf_names  # noqa: E402
from bench.e2e.run import kubectl_path  # noqa: E402

pytestmark = pytest.mark.e2e

JOBS = 20
SEED = 7


class Cluster(Protocol):
    """What this test uses of the ``cluster`` fixture (tests/e2e/conftest.py)."""

    kubeconfig: Path
    cluster_dir: Path | None

    def use_shape(self, name: str) -> None: ...


def _target(cluster: Cluster) -> harness.Target:
    assert cluster.cluster_dir is not None, "the benchmark reads /proc of the processes hack/cluster started"
    return harness.Target(cluster.kubeconfig, cluster.cluster_dir, kubectl_path())


def test_burst_through_kubegang_then_plain_pods(cluster: Cluster, kubegang: object) -> None:
    cluster.use_shape("superpod-h100")
    target = _target(cluster)
    capacity = sum(harness.gpu_nodes(target).values())
    leaves = leaf_names(2)
    # A quarter of the cluster at most, so other tests' pods on this shared cluster leave room for the burst.
    jobs = generate(JOBS, SEED, capacity, 0.25, leaves)
    workload = describe(jobs)
    assert workload["jobs"] == JOBS and workload["gpus"] <= capacity // 4
    assert any(j.pods > 1 for j in jobs), "the smoke burst should hold at least one multi-pod gang"
    settings = harness.HalfSettings(appliers=2, timeout_s=240, stall_s=90)
    stamp = time.strftime("%H%M%S")

    # As the benchmark does: the garbage collector watches GPUJobs before the burst, so nothing in
    # the burst reads a GPUJob once per job (the check below).
    harness.settle_garbage_collector(target)
    ns = f"t-bench-kubegang-{stamp}"
    try:
        kg = harness.run_kubegang(target, jobs, ns, settings, leaves)
    finally:
        harness.cleanup(target, ns, gpujobs=True)
        harness.delete_queues(target, leaves)
    assert kg["complete"], f"not every job started: {kg['job_phases']} {kg['jobs_not_started']}"
    assert kg["job_phases"] == {"Running": JOBS} or set(kg["job_phases"]) <= {"Running", "Succeeded"}
    assert kg["pods_running"]["count"] == workload["pods"]
    assert kg["pods_deleted_during_run"] == 0, "a gang was torn down during an uncontended burst"
    assert kg["audit"]["overcommitted_nodes"] == {}
    assert kg["audit"]["pods_off_plan_count"] == 0, kg["audit"]["pods_off_plan"]
    # Every start is stamped after the job's creation, and every pod bound before it ran.
    assert kg["jobs_started"]["first_s"] >= kg["jobs_created"]["first_s"]
    assert kg["pods_bound"]["last_s"] <= kg["pods_running"]["last_s"]
    # The path reads no GPUJob per job: the operator and the extender work from their watches.
    gets = kg["apiserver"]["reads"].get("GET gpujobs", 0)
    assert gets < JOBS // 2, f"{gets} GETs of GPUJobs during a burst of {JOBS} jobs"

    ns = f"t-bench-plain-{stamp}"
    try:
        plain = harness.run_plain(target, jobs, ns, settings)
    finally:
        harness.cleanup(target, ns, gpujobs=False)
    assert plain["complete"], f"{plain['pending_pods']} plain pods never bound"
    assert plain["pods_running"]["count"] == workload["pods"]
    assert plain["audit"]["overcommitted_nodes"] == {}
