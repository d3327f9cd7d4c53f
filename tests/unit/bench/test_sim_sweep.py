"""The simulated short-job sweep: each system's start path takes the steps it models, no sooner."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import scale
from bench.sim import _sweep as sweep
from bench.sim import load_cluster

TRIALS = 40


@pytest.fixture(scope="module")
def cluster() -> sweep.Cluster:
    return load_cluster("superpod-h100")


def _run(cluster: sweep.Cluster, system: str, lat: sweep.Latencies) -> tuple[sweep.SweepSpec, list[sweep.TrialTimes]]:
    spec = sweep.build_sweep(cluster, 3, TRIALS, lat.pleg_relist_s)
    policy = sweep.Operator(spec, lat) if system == "kubegang" else sweep.PlainPods(spec, lat)
    result = sweep.simulate(policy, cluster, spec.jobs, seed=3)
    assert all(t in result.finished for t in spec.trials)
    return spec, policy.trial_times(result.started)


def test_the_gangs_leave_the_sweep_a_tenth_to_a_fifth_of_the_cluster(cluster: sweep.Cluster) -> None:
    spec = sweep.build_sweep(cluster, 1, TRIALS)
    assert 0.10 * cluster.gpus <= spec.sweep_gpus <= 0.20 * cluster.gpus + 8
    assert len(spec.trials) == TRIALS


@pytest.mark.parametrize("system", sweep.SYSTEMS)
def test_every_trial_waits_at_least_its_start_path_and_its_slot_at_least_the_kubelet(
        cluster: sweep.Cluster, system: str) -> None:
    lat = sweep.latencies(kubelet_start_s=2.0)
    spec, times = _run(cluster, system, lat)
    # The driver's create, kube-scheduler's per-pod time, the binding and the kubelet, at least.
    floor = lat.api_write_s + lat.scheduler_pod_s + lat.bind_s + lat.kubelet_start_s
    if system == "kubegang":  # plus the operator's status and pod writes and the extender's verbs
        floor += 2 * lat.api_write_s + lat.extender_pod_s
    fastest = min(t.running - t.submitted for t in times)
    assert fastest >= floor - 1e-9
    if system == "kubegang":  # the loop was idle when the first trials came: no debounce for them
        assert fastest < floor + lat.debounce_s
    in_flight = [t for t in times if t.slot_freed is None]
    assert len(in_flight) == min(TRIALS, spec.sweep_gpus)  # the driver's first N
    by_end = {t.finished: name for name, t in zip(spec.trials, times, strict=True)}
    for t in times:
        if t.slot_freed is not None:  # the next trial goes only once the kubelet reported the end
            assert t.submitted >= t.slot_freed + spec.noticed_after[by_end[t.slot_freed]] - 1e-9


def test_kubegangs_longer_path_costs_it_more_than_plain_pods_on_the_same_draw(cluster: sweep.Cluster) -> None:
    lat = sweep.latencies()
    _, kg = _run(cluster, "kubegang", lat)
    _, plain = _run(cluster, sweep.PlainPods.name, lat)
    assert sweep.overhead(kg).lost_gpu_seconds > sweep.overhead(plain).lost_gpu_seconds > 0


def test_missing_end_to_end_results_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"missing\.json"):
        sweep.latencies(e2e_results=tmp_path / "missing.json")
    (tmp_path / "partial.json").write_text(json.dumps({"plain": {}}))
    with pytest.raises(ValueError, match=r"partial\.json"):
        sweep.latencies(e2e_results=tmp_path / "partial.json")


def test_the_operator_settings_are_the_ones_the_operator_runs_with() -> None:
    lat = sweep.latencies()
    settings = sweep.OperatorSettings(extender_address="x:1")
    assert (lat.resync_s, lat.api_qps, lat.api_burst, lat.creation_concurrency) == (
        settings.resync_seconds, settings.api_qps, settings.api_burst, settings.creation_concurrency)
    assert lat.debounce_s == sweep.DEBOUNCE_SECONDS


@pytest.mark.parametrize(("ys", "best"), [
    ([5.0, 5.2, 4.9], "constant"),
    ([1.0, 10.0, 100.0], "linear"),
    ([math.log(1000), math.log(10000), math.log(100000)], "log"),
])
def test_growth_names_the_fit(ys: list[float], best: str) -> None:
    assert scale.growth([1000.0, 10000.0, 100000.0], ys)["best"] == best


def test_two_points_name_no_growth() -> None:
    assert scale.growth([1000.0, 5000.0], [1.0, 5.0])["best"].startswith("n/a")


def test_the_cost_curves_next_cycle_with_nothing_freed_asks_no_refused_question_again() -> None:
    # 300 queued jobs on a 95%-held cluster: the first cycle reaches every one; the next, with no gang
    # ended in between, answers every refusal from memory (the room epoch) and asks nothing.
    row = scale.cycle_curve(256, 300)
    assert row["tried"] == 300 and row["plans"] > row["admitted"] > 0
    assert row["next_plans"] == 0


def test_one_operator_write_is_the_end_to_end_sweeps_median_and_a_missing_or_zero_one_is_named(
        tmp_path: Path) -> None:
    data = json.loads(sweep.SWEEP_RESULTS.read_text())
    median_ms = data["kubegang"]["steps_ms"][sweep.WRITE_STEP]["p50"]
    assert sweep.latencies().api_write_s == pytest.approx(median_ms / 1000) and median_ms > 0
    with pytest.raises(ValueError, match=r"nothing\.json"):
        sweep.latencies(sweep_results=tmp_path / "nothing.json")
    data["kubegang"]["steps_ms"][sweep.WRITE_STEP]["p50"] = 0.0
    (tmp_path / "zero.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"zero\.json.*not usable"):
        sweep.latencies(sweep_results=tmp_path / "zero.json")
