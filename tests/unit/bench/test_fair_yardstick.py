"""The fair yardstick of the gang benchmark: workloads, baselines, the neutral judge, windows, intervals."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from types import SimpleNamespace
from typing import Any

import pytest

from bench import _gangs as gangs
from bench.sim import (
    POLICIES,
    GangBinpackModel,
    GangWorkload,
    Job,
    SlurmTreeModel,
    VolcanoHyperNodeModel,
    generate,
    load_cluster,
    narrowest_level,
    offered_load,
    round_up_limit,
    simulate,
)
from bench.sim._stats import interval, paired, t975
from bench.sim._workload import TIME_LIMITS_H
from kubegang.levels import Level

HOUR = 3600.0
H100 = "NVIDIA-H100-80GB-HBM3"


def _job(job_id: str, arrival: float, pods: int, gpus: int, duration: float, limit: float | None = None) -> Job:
    return Job(job_id, arrival, pods, gpus, duration, "team-0", 0, H100, limit)


# --- the neutral judge -------------------------------------------------------------------------------


def test_the_oracle_counts_free_gpus_per_domain_level_by_level() -> None:
    topo = load_cluster("superpod-h100").topology  # 4 leaves of 32 nodes x 8 GPUs, one spine
    everything = [8] * topo.node_count
    assert narrowest_level(topo, everything, 1, 4) is Level.NODE
    assert narrowest_level(topo, everything, 2, 8) is Level.LEAF  # one NVLink domain per node here
    assert narrowest_level(topo, everything, 33, 8) is Level.SPINE
    leaf = topo.domain_of[Level.LEAF]
    half = [8 if sum(1 for m in range(n) if leaf[m] == leaf[n]) < 16 else 0 for n in range(topo.node_count)]
    assert narrowest_level(topo, half, 16, 8) is Level.LEAF
    assert narrowest_level(topo, half, 17, 8) is Level.SPINE  # 16 whole nodes free per leaf
    assert narrowest_level(topo, [4] * topo.node_count, 1, 8) is None  # GPUs enough, whole nodes none
    with pytest.raises(ValueError, match="pods and gpus_per_pod"):
        narrowest_level(topo, everything, 0, 8)


def test_the_hypernode_model_is_always_narrowest_and_the_blind_binpack_is_not() -> None:
    cluster = load_cluster("gb200-nvl72")
    jobs = generate(GangWorkload(jobs=200, seed=4), cluster.gpus, 4, cluster.products[0])
    topo_aware = simulate(VolcanoHyperNodeModel(), cluster, jobs, seed=4).metrics
    blind = simulate(GangBinpackModel(), cluster, jobs, seed=4).metrics
    assert topo_aware.narrowest_share == 1.0
    assert blind.narrowest_share < 0.95


# --- Volcano: random ties ----------------------------------------------------------------------------


def _first_node(seed: int) -> str:
    """Where binpack puts one 8-GPU pod on an empty cluster (every node ties)."""
    cluster = load_cluster("superpod-h100")
    model = GangBinpackModel()
    snapshot = cluster.snapshot()
    model.reset(cluster, snapshot, random.Random(seed))
    model.submit(_job("a", 0.0, 1, 8, HOUR), 0.0)
    model.schedule(0.0)
    return snapshot.allocations_of("a")[0].node


def test_binpack_breaks_ties_between_equal_nodes_at_random_but_per_seed() -> None:
    assert _first_node(1) == _first_node(1)
    assert len({_first_node(seed) for seed in range(1, 9)}) > 1  # not always the first node by name


# --- workloads ---------------------------------------------------------------------------------------


def test_kalos_run_times_have_the_published_median_and_mean_and_grow_with_size() -> None:
    jobs = generate(GangWorkload(sizes="kalos", jobs=6000, seed=11), 1024, 8)
    runs = [j.duration for j in jobs]
    assert statistics.median(runs) == pytest.approx(124.0, rel=0.15)
    assert statistics.fmean(runs) == pytest.approx(21 * 60.0, rel=0.25)
    small = statistics.median(j.duration for j in jobs if j.gpus == 1)
    large = statistics.median(j.duration for j in jobs if j.gpus >= 64)
    assert large > 4 * small


def test_each_run_offers_exactly_its_load_and_arrives_in_bursts() -> None:
    spec = GangWorkload(sizes="kalos", jobs=3000, seed=2)
    jobs = generate(spec, 1024, 8)
    assert offered_load(jobs, 1024) == pytest.approx(1.2, rel=1e-3)
    natural = generate(dataclasses.replace(spec, exact_load=False), 1024, 8)
    assert [dataclasses.replace(j, arrival=0.0) for j in jobs] == [dataclasses.replace(j, arrival=0.0)
                                                                  for j in natural]

    def dispersion(js: list[Job]) -> float:  # variance / mean of arrivals per hour: 1 for Poisson
        counts: dict[int, int] = {}
        for j in js:
            counts[int(j.arrival // HOUR)] = counts.get(int(j.arrival // HOUR), 0) + 1
        values = [counts.get(h, 0) for h in range(int(js[-1].arrival // HOUR))]
        return statistics.pvariance(values) / statistics.fmean(values)

    assert dispersion(jobs) > 2.0
    assert dispersion(generate(dataclasses.replace(spec, burst_factor=1.0), 1024, 8)) < 1.6
    with pytest.raises(ValueError, match="burst_factor x burst_share"):
        generate(dataclasses.replace(spec, burst_factor=6.0), 1024, 8)


def test_time_limits_overestimate_run_times_and_are_common_limits_drawn_on_their_own_stream() -> None:
    spec = GangWorkload(sizes="philly", jobs=2000, seed=5)
    jobs = generate(spec, 1024, 8)
    common = {h * HOUR for h in TIME_LIMITS_H}
    for job in jobs:
        assert job.time_limit is not None and job.limit == job.time_limit
        assert job.duration <= job.time_limit <= max(job.duration, round_up_limit(5 * job.duration))
        assert job.time_limit in common
    exact = generate(dataclasses.replace(spec, limit_factor=(1.0, 1.0)), 1024, 8)
    assert [dataclasses.replace(j, time_limit=None) for j in exact] == [dataclasses.replace(j, time_limit=None)
                                                                       for j in jobs]
    assert round_up_limit(1.0) == HOUR and round_up_limit(5 * HOUR) == 8 * HOUR
    assert round_up_limit(200 * HOUR) == 168 * HOUR  # the partition's MaxTime
    with pytest.raises(ValueError, match="limit_factor"):
        generate(dataclasses.replace(spec, limit_factor=(0.5, 2.0)), 1024, 8)


# --- Slurm: time limits, node-aware reservations ------------------------------------------------------


def test_slurm_plans_with_time_limits_so_a_job_that_ends_early_lets_backfill_delay_the_head() -> None:
    # 4 nodes. "a" holds 3 nodes, runs 1 h but asked for 8 h; "big" needs all 4; "c" (1 node, 2 h, limit
    # 2 h) arrives next. By limits, "a" ends at 8 h, so "c" ends before the head's reservation and
    # backfills; in truth "a" ends at 1 h and "big" then waits for "c".
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_job("a", 0.0, 3, 8, HOUR, 8 * HOUR), _job("big", 10.0, 4, 8, HOUR, HOUR),
            _job("c", 20.0, 1, 8, 2 * HOUR, 2 * HOUR)]
    result = simulate(SlurmTreeModel(), cluster, jobs)
    assert result.started["c"] == 20.0
    assert result.started["big"] == pytest.approx(20.0 + 2 * HOUR)


def test_slurm_reserves_whole_nodes_found_by_a_will_run_test_and_backfills_around_them() -> None:
    # Every node busy with a 6-GPU job (limits 1 h, 2 h, 10 h, 10 h): GPUs free but no whole node.
    # "big" (2 x 8 GPUs) gets the two nodes that empty first, at 2 h; a 2-GPU job of limit 5 h
    # backfills on a node that no reservation needs, although it would end after the head's start.
    cluster = load_cluster("superpod-h100", limit=4)
    names = [n.name for n in cluster.topology.nodes]
    limits = [HOUR, 2 * HOUR, 10 * HOUR, 10 * HOUR]
    jobs = [_job(f"x{i}", float(i), 1, 6, limit, limit) for i, limit in enumerate(limits)]
    jobs += [_job("big", 10.0, 2, 8, HOUR, HOUR), _job("s", 20.0, 1, 2, 5 * HOUR, 5 * HOUR)]
    model = SlurmTreeModel()
    placed: dict[str, set[str]] = {}
    reservations: list[Any] = []

    class Watch(SlurmTreeModel):
        def schedule(self, now: float) -> Any:
            step = super().schedule(now)
            for job_id in step.started:
                placed[job_id] = {a.node for a in self.snapshot.allocations_of(job_id)}
            if now == 10.0:
                reservations.extend(self.reservations)
            return step

    result = simulate(Watch(), cluster, jobs)
    assert model.reserve == 5
    assert [(r.job, r.start, sorted(r.nodes)) for r in reservations] == [("big", 1.0 + 2 * HOUR, [0, 1])]
    assert placed["x0"] | placed["x1"] == {names[0], names[1]}
    assert result.started["s"] == 20.0 and placed["s"] <= set(names[2:])
    assert result.started["big"] == 1.0 + 2 * HOUR  # x1 started at 1 s


def test_slurm_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="reserve and max_test"):
        SlurmTreeModel(reserve=0)


# --- windows and intervals ---------------------------------------------------------------------------


def test_allocation_is_measured_over_the_common_arrival_window_and_to_the_end_of_the_drain() -> None:
    cluster = load_cluster("superpod-h100", limit=4)  # 32 GPUs
    jobs = [_job("a", 0.0, 1, 8, 2 * HOUR), _job("b", HOUR, 1, 8, HOUR)]
    m = simulate(POLICIES["kubegang"](), cluster, jobs).metrics
    assert m.alloc_arrivals == pytest.approx(8 / 32)  # first to last arrival: only "a" ran
    assert m.makespan_h == pytest.approx(2.0)
    assert m.alloc_to_drain == pytest.approx(24 / (32 * 2))
    assert m.offered_load == pytest.approx(24 / 32)
    assert (m.large_gpus, m.large_jobs, m.large_wait_max_h, m.starved) == (8, 2, 0.0, 0)


def test_starved_jobs_and_the_largest_decile_waits_are_counted() -> None:
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_job("long", 0.0, 4, 8, 30 * HOUR), _job("big", 1.0, 4, 8, 60.0)]
    jobs += [_job(f"s{i}", 2.0 + i, 1, 1, 60.0) for i in range(8)]
    m = simulate(POLICIES["gang-binpack"](), cluster, jobs).metrics
    assert m.starved == 9  # everything waited 30 h behind the whole-cluster job
    assert (m.large_gpus, m.large_jobs) == (32, 2)  # sizes 1 x 8, 32 x 2: the 90th percentile is 32
    assert m.large_wait_max_h == pytest.approx(30 - 1 / 3600, abs=1e-3)
    assert m.queue_delay_max_h == pytest.approx(30 + 1 / 60 - 2 / 3600, abs=1e-3)  # s0, after "big"


def test_intervals_use_students_t_and_paired_differences() -> None:
    iv = interval([1.0, 2.0, 3.0])
    assert iv.mean == 2.0 and iv.half == pytest.approx(4.303 / math.sqrt(3))
    assert math.isnan(interval([5.0]).half) and interval([]).n == 0
    assert interval([1.0, math.nan, 3.0]).n == 2
    diff = paired([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])
    assert diff.mean == 1.0 and diff.half == 0.0
    assert t975(40) == 1.960
    with pytest.raises(ValueError, match="same seeds"):
        paired([1.0], [1.0, 2.0])


def _runs(values: dict[str, list[float]], field: str = "alloc_arrivals") -> list[dict[str, Any]]:
    return [{"shape": "s", "workload": "w", "policy": p, "seed": i + 1, "metrics": SimpleNamespace(**{field: v})}
            for p, vs in values.items() for i, v in enumerate(vs)]


def test_a_row_is_won_only_when_the_paired_interval_excludes_zero() -> None:
    base = {b: [0.1, 0.1, 0.1] for b in gangs.BASELINES}
    crit = gangs.CRITERIA[0]
    ahead = _runs({**base, "kubegang": [0.2, 0.21, 0.19], "slurm-tree": [0.15, 0.16, 0.14]})
    assert gangs.verdict(ahead, "s", "w", crit)[:2] == ("**ahead**", "slurm-tree")
    tied = _runs({**base, "kubegang": [0.2, 0.1, 0.15], "slurm-tree": [0.15, 0.16, 0.14]})
    assert gangs.verdict(tied, "s", "w", crit)[0] == "tied"
    behind = _runs({**base, "kubegang": [0.05, 0.06, 0.04]})
    assert gangs.verdict(behind, "s", "w", crit)[0] == "**behind**"
    makespan = gangs.CRITERIA[1]  # lower is better
    shorter = _runs({**{b: [10.0, 11.0, 12.0] for b in gangs.BASELINES}, "kubegang": [9.0, 10.0, 11.0]},
                    "makespan_h")
    assert gangs.verdict(shorter, "s", "w", makespan)[0] == "**ahead**"
