"""``bench.sim.plan_calls`` counts the cycle's questions to the placement port without changing a decision,
and the refusals kept by the room epoch change no decision either."""

from __future__ import annotations

from bench._gangs import TUNING_SEED_BASE
from bench.sim import KubegangPolicy, benchmark_spec, for_cluster, load_cluster, simulate
from bench.sim.plan_calls import CountingPolicy, main


def test_counting_changes_no_decision_and_no_refusal_is_asked_again_with_nothing_released() -> None:
    cluster = load_cluster("gb200-nvl72")
    work = for_cluster(benchmark_spec("philly", 200, TUNING_SEED_BASE + 1), cluster)
    counting = CountingPolicy()
    counted = simulate(counting, cluster, work, seed=TUNING_SEED_BASE + 1).metrics
    plain = simulate(KubegangPolicy(), cluster, work, seed=TUNING_SEED_BASE + 1).metrics
    assert counted == plain
    c = counting.counts
    assert c["plan placed"] == len(work)  # every job starts once (no preemption in this workload)
    assert c["refused again, nothing released"] == 0 < counting.cycle.plans_remembered


def test_refusals_answered_from_memory_change_no_decision() -> None:
    # The same runs with Plan answers that carry no epoch (every refusal asked again): the same jobs start
    # at the same times, with more Plans asked.
    cluster = load_cluster("gb200-nvl72")
    for workload, jobs in (("philly", 200), ("kalos", 100)):
        work = for_cluster(benchmark_spec(workload, jobs, TUNING_SEED_BASE + 2), cluster)
        kept, asked = CountingPolicy(), CountingPolicy(remember=False)
        with_memory = simulate(kept, cluster, work, seed=TUNING_SEED_BASE + 2)
        without = simulate(asked, cluster, work, seed=TUNING_SEED_BASE + 2)
        assert with_memory.started == without.started and with_memory.metrics == without.metrics, workload
        assert asked.cycle.plans_remembered == 0 < asked.counts["refused again, nothing released"]
        assert (kept.counts["plan refused"] + kept.cycle.plans_remembered
                == asked.counts["plan refused"]), workload


def test_main_prints_a_row_per_seed(capsys: object) -> None:
    assert main(["--jobs", "20", "--seeds", "1"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert out.count(f"| {TUNING_SEED_BASE + 1} |") == 1
