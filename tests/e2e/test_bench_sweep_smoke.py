"""A tiny configuration of the short-job sweep benchmark (bench/e2e/sweep.py): correctness, not speed.

One 2-node training gang, then 8 one-GPU trials of 2 s with 4 in flight, through kubegang (1-replica
GPUJobs in one queue) and as plain pods. Every trial must run and finish, the driver must never have
more than 4 in flight, each trial's stamps must come in the order the overhead assumes, and no node
may hold more GPUs than it has.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Protocol

import pytest

# bench/ is not an installed package: make the repository root importable (as tests/unit/bench does).
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)

from bench.e2e import _harness as harness  # noqa: E402
from bench.e2e import _sweep_workload as workload  # noqa: E402
from bench.e2e._sweep_halves import delete_queues, run_half  # noqa: E402
from bench.e2e.run import kubectl_path  # noqa: E402

pytestmark = pytest.mark.e2e

TRIALS = 8
IN_FLIGHT = 4
RUNTIME_S = 2.0
ORDER = ("submitted", "pod_created", "bound", "running", "finished")
"""Each trial's stamps from the driver and the pod watch, in the order they must come. (The driver's
"completed" comes from the GPUJob watch for kubegang, a second stream, so it is only checked against
"running": nothing can be over before it ran.)"""


class Cluster(Protocol):
    kubeconfig: Path
    cluster_dir: Path | None

    def use_shape(self, name: str) -> None: ...


def _check_half(half: dict[str, Any]) -> None:
    assert half["complete"], f"not every trial finished: {half['submit_errors']} {half.get('trial_job_phases')}"
    assert half["trials_finished"] == TRIALS and half["submit_errors"] == []
    assert half["audit"]["overcommitted_nodes"] == {}
    trials = half["trials"]
    for t in trials:
        stamps = [t[k] for k in ORDER]
        assert None not in stamps and stamps == sorted(stamps), f"{t['name']}: {dict(zip(ORDER, stamps, strict=True))}"
        assert t["completed"] >= t["running"]
    # The first IN_FLIGHT start at once; every later one takes the slot of a trial that was over.
    assert sum(1 for t in trials if t["predecessor"] is None) == IN_FLIGHT
    by_name = {t["name"]: t for t in trials}
    for t in trials:
        if t["predecessor"] is not None:
            assert t["submitted"] >= by_name[t["predecessor"]]["completed"]
    for t in trials:
        in_flight = sum(1 for u in trials if u["submitted"] <= t["submitted"] < u["completed"])
        assert in_flight <= IN_FLIGHT, f"{in_flight} trials in flight when {t['name']} was submitted"
    o = half["overhead"]
    assert o["trial_gpu_seconds"] >= TRIALS * RUNTIME_S * 0.9
    assert o["ratio"] > 0 and o["ratio_at_seed_runtime"] < o["ratio"]
    assert half["steps_ms"]["pod created → bound"]["n"] == TRIALS


def test_sweep_through_kubegang_then_plain_pods(cluster: Cluster, kubegang: object) -> None:
    cluster.use_shape("superpod-h100")
    assert cluster.cluster_dir is not None, "the benchmark reads /proc of the processes hack/cluster started"
    target = harness.Target(cluster.kubeconfig, cluster.cluster_dir, kubectl_path())
    plan = workload.plan(harness.gpu_nodes(target), training_nodes=2, gang_nodes=2, trials=TRIALS,
                         runtime_s=RUNTIME_S, concurrency=IN_FLIGHT)
    settings = harness.HalfSettings(timeout_s=120, stall_s=60)
    stamp = time.strftime("%H%M%S")

    ns = f"t-sweep-kubegang-{stamp}"
    try:
        kg = run_half(target, plan, ns, settings, kubegang=True, count_requests=False)
    finally:
        harness.cleanup(target, ns, gpujobs=True)
        delete_queues(target)
    _check_half(kg)
    assert kg["trial_job_phases"] == {"Succeeded": TRIALS}
    assert kg["audit"]["pods_off_plan_count"] == 0, kg["audit"]["pods_off_plan"]
    assert kg["steps_ms"]["GPUJob seen → Admitted"]["n"] == TRIALS

    ns = f"t-sweep-plain-{stamp}"
    try:
        plain = run_half(target, plan, ns, settings, kubegang=False, count_requests=False)
    finally:
        harness.cleanup(target, ns, gpujobs=False)
    _check_half(plain)
