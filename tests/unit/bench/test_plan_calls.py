"""``bench.sim.plan_calls`` counts the cycle's questions to the placement port without changing a decision."""

from __future__ import annotations

from bench._gangs import TUNING_SEED_BASE
from bench.sim import KubegangPolicy, benchmark_spec, for_cluster, load_cluster, simulate
from bench.sim.plan_calls import CountingPolicy, main


def test_counting_changes_no_decision_and_finds_refusals_asked_again() -> None:
    cluster = load_cluster("gb200-nvl72")
    work = for_cluster(benchmark_spec("philly", 200, TUNING_SEED_BASE + 1), cluster)
    counting = CountingPolicy()
    counted = simulate(counting, cluster, work, seed=TUNING_SEED_BASE + 1).metrics
    plain = simulate(KubegangPolicy(), cluster, work, seed=TUNING_SEED_BASE + 1).metrics
    assert counted == plain
    c = counting.counts
    assert c["plan placed"] == len(work)  # every job starts once (no preemption in this workload)
    assert 0 < c["refused again, nothing released"] <= c["plan refused"]


def test_main_prints_a_row_per_seed(capsys: object) -> None:
    assert main(["--jobs", "20", "--seeds", "1"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert out.count(f"| {TUNING_SEED_BASE + 1} |") == 1
