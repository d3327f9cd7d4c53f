"""``bench.sim.try_large_waits``: the reference ideas build the policies they name and run paired."""

from __future__ import annotations

from bench.sim import KubegangPolicy, SlurmTreeModel
from bench.sim.try_large_waits import IDEAS, render, run


def test_the_reference_ideas_are_kubegang_without_reservations_and_slurm_with_one() -> None:
    none = IDEAS["no reservations"]()
    assert isinstance(none, KubegangPolicy)
    assert none.backfill_policy.reserve_after_seconds is None
    assert none.backfill_policy.planned_reserve_after_seconds is None
    easy = IDEAS["slurm-tree, 1 reservation (EASY)"]()
    assert isinstance(easy, SlurmTreeModel) and easy.reserve == 1


def test_a_short_run_pairs_each_idea_with_kubegang_on_the_same_seed() -> None:
    runs = run([("gb200-nvl72", "philly", 1)], 20, ["no reservations", "slurm-tree, 1 reservation (EASY)"])
    assert sorted(r["policy"] for r in runs) == sorted(
        ["kubegang", "slurm-tree", "no reservations", "slurm-tree, 1 reservation (EASY)"])
    assert len({r["seed"] for r in runs}) == 1
    table = render(runs)
    assert "| gb200-nvl72 / philly (1 seeds) | no reservations |" in table


def test_reserving_past_the_p95_wait_has_no_threshold_of_its_own_until_20_admissions_then_the_p95() -> None:
    from bench.sim import benchmark_spec, for_cluster, load_cluster, percentile, simulate
    from bench.sim.try_large_waits import P95_MIN_ADMISSIONS, PastP95Policy

    policy = IDEAS["reserve past the p95 wait"]()
    assert isinstance(policy, PastP95Policy)
    cluster = load_cluster("gb200-nvl72")
    simulate(policy, cluster, for_cluster(benchmark_spec("kalos", 40, 101), cluster), seed=101)
    quota = policy.quota
    waits = quota.waits
    assert len(waits) >= P95_MIN_ADMISSIONS  # one wait per admission
    assert quota.reserve_after(None) == percentile(waits, 95.0)
    quota.waits = waits[:P95_MIN_ADMISSIONS - 1]
    assert quota.reserve_after(None) is None  # the policy's own threshold
