"""Multi-node gang workloads, generated from published statistics of real GPU clusters.

No public trace of a multi-node training cluster comes with its fabric, so the gang workloads are
synthetic, drawn from distributions fitted to published numbers:

- ``kalos``: Shanghai AI Lab's Acme traces (Hu et al., "Characterization of Large Language Model
  Development in the Datacenter", NSDI '24, and the AcmeTrace repository's summary): on the Kalos
  cluster the median job asks for 1 GPU, the mean is about 27 GPUs and the largest jobs take 1,024;
  the median run time is 124 s and the mean 21 min. Sizes are powers of two with the weights in
  ``KALOS_SIZES``; run times are calibrated to that median and mean (``duration_model``).
- ``philly``: Microsoft Philly (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters
  for DNN Training Workloads", USENIX ATC '19): mean about 1.9 GPUs per job, few multi-node jobs.
  We have no verified per-size run-time figure for Philly at hand, so its run times keep the
  earlier assumption (median 1 h, mean ~2 h) and the same size correlation; this is stated on
  the benchmark page.

A job of ``g`` GPUs on nodes of ``n`` GPUs becomes one pod of ``g`` GPUs when ``g <= n``, else
``g / n`` pods of ``n`` GPUs (whole nodes, as data-parallel training is deployed). Kalos's largest
jobs (1,024 GPUs) are 42% of its 2,416 GPUs, so sizes are capped at the largest power of two not
above ``max_share`` (default half) of the simulated cluster; the capped mean is reported.

**Run time grows with size** (large pre-training jobs are the long ones, short debugging jobs
the small ones): ``log d = mu + size_exponent * ln(g) + sigma * Z``, i.e. the median run time
grows as ``g ** size_exponent``; ``mu`` and ``sigma`` are solved so that the *mixture* over sizes
has the published median and mean (capped at ``max_hours``, floored at ``MIN_DURATION_S``).

**Arrivals are bursty**: a two-state Markov-modulated Poisson process. Bursts (``burst_share`` of
the time, mean length ``burst_hours``) arrive ``burst_factor`` times faster than the mean rate, calm
periods slower, so the mean rate is unchanged; the rate is chosen so that the offered load (GPU-
seconds requested per second of arrivals, over the cluster's GPUs; with the size correlation
that is ``E[g d]``, not ``E[g] E[d]``) is ``load``. A finite run's GPU-seconds are dominated by its
few large, long jobs, so the load it actually offers varies by a factor of several from seed to
seed (0.4-3.7 for 1,000 Kalos jobs). With ``exact_load`` (the default) the arrival times are then
stretched by one factor so that the run offers exactly ``load``: the bursts, the order and every
job stay as drawn, and the seed-to-seed spread measures the scheduler, not the sample's luck.
``offered_load`` measures what a run offers; the benchmark prints it per run.

**Time limits** (what Slurm schedules by): each job's limit is its true run time times a factor
drawn uniformly from ``limit_factor`` (users overestimate by 1-5x), rounded up to the next of the
common limits in ``TIME_LIMITS_H`` (at most the partition MaxTime, 168 h, and never below the run
time: every job ends within its limit); it is drawn from its own seeded stream, so the rest of
the workload does not depend on it.

Jobs are spread at random over ``queues`` teams; ``priority_share`` of them (0 by default) get
priority 1 so that preemption can be exercised.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._cluster import Cluster

KALOS_SIZES: dict[int, float] = {
    1: 0.55, 2: 0.05, 4: 0.05, 8: 0.12, 16: 0.07, 32: 0.05, 64: 0.04,
    128: 0.03, 256: 0.02, 512: 0.012, 1024: 0.008,
}
"""GPUs per job -> probability (normalised on use); median 1, mean ~27 (Acme/Kalos, NSDI '24)."""

PHILLY_SIZES: dict[int, float] = {1: 0.80, 2: 0.08, 4: 0.06, 8: 0.045, 16: 0.01, 32: 0.005}
"""GPUs per job -> probability; mean ~1.9 (Philly, ATC '19)."""

SIZE_TABLES: dict[str, dict[int, float]] = {"kalos": KALOS_SIZES, "philly": PHILLY_SIZES}

RUN_TIMES: dict[str, tuple[float, float]] = {"kalos": (124.0, 21 * 60.0), "philly": (3600.0, 7200.0)}
"""Workload -> (median, mean) run time in seconds: Kalos from AcmeTrace's summary; Philly assumed."""

TIME_LIMITS_H: tuple[float, ...] = (1, 2, 4, 8, 12, 24, 48, 72, 168)
"""Common Slurm time limits (hours) a user's estimate is rounded up to; 168 h is the partition MaxTime."""

PHILLY_JOBS_FACTOR = 2
"""Philly runs have this many times the Kalos runs' jobs (``benchmark_spec``)."""

MIN_DURATION_S = 10.0
"""Shortest run time generated (a job that starts at all runs some seconds)."""


@dataclass(frozen=True)
class Job:
    """A gang job: ``pods`` pods of ``gpus_per_pod`` GPUs that run together for ``duration`` seconds."""

    id: str
    arrival: float
    """Submission time, seconds since the start of the simulation."""
    pods: int
    gpus_per_pod: int
    duration: float
    """Run time once all pods run, seconds."""
    queue: str = "team-0"
    priority: int = 0
    product: str | None = None
    """GPU product the job needs (None: any)."""
    time_limit: float | None = None
    """The user's time limit, seconds (>= ``duration``); what a Slurm-like scheduler plans with.
    None: unknown (then a planner can only assume the job's true run time)."""

    @property
    def limit(self) -> float:
        """The time limit, or the run time when the job has none."""
        return self.duration if self.time_limit is None else self.time_limit

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


@dataclass(frozen=True)
class GangWorkload:
    """Parameters of a generated gang workload (all documented in the module docstring)."""

    sizes: str = "kalos"
    """Name of the size table: ``kalos`` or ``philly``."""
    jobs: int = 1500
    load: float = 1.2
    """Offered load: requested GPU-hours per hour of arrivals, over the cluster's GPUs."""
    median_seconds: float | None = None
    """Median run time over all jobs (None: the workload's published figure, ``RUN_TIMES``)."""
    mean_seconds: float | None = None
    """Mean run time over all jobs (None: ``RUN_TIMES``)."""
    size_exponent: float = 0.35
    """Median run time grows as GPUs ** this (0: run time independent of size)."""
    max_hours: float = 48.0
    burst_factor: float = 3.0
    """Arrival rate in a burst over the mean rate (1: plain Poisson arrivals)."""
    burst_share: float = 0.2
    """Share of the time spent in bursts (``burst_factor * burst_share`` must stay below 1)."""
    burst_hours: float = 2.0
    """Mean length of a burst (exponential)."""
    limit_factor: tuple[float, float] = (1.0, 5.0)
    """Users' over-estimate of run time: the time limit is run time x U(lo, hi), rounded up."""
    exact_load: bool = True
    """Stretch the arrival times so that the run offers exactly ``load`` (see the module docstring)."""
    queues: int = 4
    priority_share: float = 0.0
    max_share: float = 0.5
    """Largest job, as a share of the cluster's GPUs (rounded down to a power of two)."""
    seed: int = 1

    def size_cap(self, cluster_gpus: int) -> int:
        """The largest job size on a cluster of ``cluster_gpus`` GPUs."""
        limit = max(1, int(cluster_gpus * self.max_share))
        return 1 << (limit.bit_length() - 1)


def size_stats(table: dict[int, float], cap: int | None = None) -> tuple[float, float]:
    """(median, mean) GPUs per job of a size table, sizes capped at ``cap``."""
    total = sum(table.values())
    mean = sum(min(s, cap or s) * p for s, p in table.items()) / total
    acc = 0.0
    for size in sorted(table):
        acc += table[size] / total
        if acc >= 0.5:
            return float(min(size, cap or size)), mean
    return float(max(table)), mean


def for_cluster(spec: GangWorkload, cluster: Cluster) -> list[Job]:
    """The jobs of ``spec`` on a simulator cluster (its GPUs, node size and first GPU product)."""
    return generate(spec, cluster.gpus, cluster.topology.max_gpus_per_node, cluster.products[0])


def benchmark_spec(sizes: str, jobs: int, seed: int) -> GangWorkload:
    """The gang workload ``bench.run_all`` runs: Philly jobs are ~15x smaller than Kalos ones, so
    more are needed for a comparable arrival window (``PHILLY_JOBS_FACTOR``: what the time budget allows)."""
    return GangWorkload(sizes=sizes, jobs=jobs * PHILLY_JOBS_FACTOR if sizes == "philly" else jobs, seed=seed)


def round_up_limit(seconds: float) -> float:
    """The smallest common time limit (``TIME_LIMITS_H``) at or above ``seconds``; beyond them the
    largest, the partition's MaxTime (a request above it is clamped, as ``sbatch`` does)."""
    for hours in TIME_LIMITS_H:
        if hours * 3600.0 >= seconds:
            return hours * 3600.0
    return TIME_LIMITS_H[-1] * 3600.0


def offered_load(jobs: Sequence[Job], cluster_gpus: int) -> float:
    """GPU-seconds the jobs ask for over GPU-seconds of the cluster between first and last arrival."""
    if len(jobs) < 2:
        return math.nan
    span = max(j.arrival for j in jobs) - min(j.arrival for j in jobs)
    return sum(j.gpus * j.duration for j in jobs) / (cluster_gpus * span) if span > 0 else math.nan


@dataclass(frozen=True)
class DurationModel:
    """``log d = mu + size_exponent * ln(g) + sigma * Z``, capped and floored (module docstring)."""

    mu: float
    sigma: float
    size_exponent: float
    max_seconds: float

    def draw(self, gpus: int, rng: random.Random) -> float:
        raw = math.exp(self.mu + self.size_exponent * math.log(gpus) + self.sigma * rng.gauss(0.0, 1.0))
        return min(max(raw, MIN_DURATION_S), self.max_seconds)


_PROBE = 20_000


@lru_cache(maxsize=64)
def duration_model(sizes: tuple[tuple[int, float], ...], median: float, mean: float, size_exponent: float,
                   max_seconds: float) -> DurationModel:
    """Solve ``mu`` and ``sigma`` so that run times over the size mix have ``median`` and ``mean``.

    On a fixed probe sample: for a given sigma the median fixes mu exactly (a shift in log space);
    the mean then grows with sigma, so sigma is found by bisection. A ValueError says when the
    mean cannot be reached under the cap."""
    if not 0 < median < mean:
        raise ValueError(f"run times: the median ({median} s) must be positive and below the mean ({mean} s)")
    probe = random.Random(7_919)
    values = [s for s, _ in sizes]
    weights = [w for _, w in sizes]
    logs = [size_exponent * math.log(g) for g in probe.choices(values, weights, k=_PROBE)]
    zs = [probe.gauss(0.0, 1.0) for _ in range(_PROBE)]

    def fit(sigma: float) -> tuple[float, float]:
        ys = [a + sigma * z for a, z in zip(logs, zs, strict=True)]
        mu = math.log(median) - statistics.median(ys)
        got = statistics.fmean(min(max(math.exp(mu + y), MIN_DURATION_S), max_seconds) for y in ys)
        return mu, got

    lo, hi = 0.0, 6.0
    if fit(hi)[1] < mean:
        raise ValueError(f"run times: a mean of {mean} s is out of reach under the {max_seconds} s cap")
    for _ in range(50):
        mid = (lo + hi) / 2
        if fit(mid)[1] < mean:
            lo = mid
        else:
            hi = mid
    mu, _ = fit(hi)
    return DurationModel(mu, hi, size_exponent, max_seconds)


def _arrivals(count: int, rate: float, spec: GangWorkload, rng: random.Random) -> list[float]:
    """``count`` arrival times of the two-state bursty process with mean rate ``rate`` (per second)."""
    burst, share = spec.burst_factor, spec.burst_share
    if burst <= 1.0 or share <= 0.0:
        out, now = [], 0.0
        for _ in range(count):
            now += rng.expovariate(rate)
            out.append(now)
        return out
    if burst * share >= 1.0:
        raise ValueError(f"GangWorkload.burst_factor x burst_share must be below 1, got {burst} x {share}")
    rates = (rate * (1 - share * burst) / (1 - share), rate * burst)  # calm, burst
    mean_len = (spec.burst_hours * 3600.0 * (1 - share) / share, spec.burst_hours * 3600.0)
    state = 0
    now, state_end = 0.0, rng.expovariate(1.0 / mean_len[0])
    out = []
    while len(out) < count:
        gap = rng.expovariate(rates[state])
        if now + gap <= state_end:
            now += gap
            out.append(now)
            continue
        now = state_end  # memoryless: the next arrival is drawn afresh in the new state
        state = 1 - state
        state_end = now + rng.expovariate(1.0 / mean_len[state])
    return out


def generate(spec: GangWorkload, cluster_gpus: int, gpus_per_node: int, product: str | None = None) -> list[Job]:
    """The jobs of ``spec`` for a cluster of ``cluster_gpus`` GPUs in nodes of ``gpus_per_node``."""
    try:
        table = SIZE_TABLES[spec.sizes]
    except KeyError:
        raise ValueError(f"GangWorkload.sizes must be one of {', '.join(SIZE_TABLES)}, got {spec.sizes!r}") from None
    if spec.jobs < 1 or spec.load <= 0 or spec.queues < 1:
        raise ValueError("GangWorkload.jobs, load and queues must be positive")
    lo, hi = spec.limit_factor
    if not 1.0 <= lo <= hi:
        raise ValueError(f"GangWorkload.limit_factor must be (lo, hi) with 1 <= lo <= hi, got {spec.limit_factor}")
    rng = random.Random(spec.seed)
    limits = random.Random(spec.seed * 1_000_003 + 17)
    cap = spec.size_cap(cluster_gpus)
    capped: dict[int, float] = {}
    for size, weight in table.items():
        capped[min(size, cap)] = capped.get(min(size, cap), 0.0) + weight
    sizes = sorted(capped)
    weights = [capped[s] for s in sizes]
    median, mean = RUN_TIMES[spec.sizes]
    model = duration_model(tuple(zip(sizes, weights, strict=True)), spec.median_seconds or median,
                           spec.mean_seconds or mean, spec.size_exponent, spec.max_hours * 3600.0)
    # E[g d] of the mix, estimated with an independent generator (the rate must not consume ``rng``).
    probe = random.Random(spec.seed + 1_000_003)
    gd = statistics.fmean(g * model.draw(g, probe) for g in probe.choices(sizes, weights, k=20_000))
    rate = spec.load * cluster_gpus / gd  # jobs per second
    times = _arrivals(spec.jobs, rate, spec, rng)
    jobs: list[Job] = []
    for i, now in enumerate(times):
        gpus = rng.choices(sizes, weights)[0]
        if gpus <= gpus_per_node:
            pods, per_pod = 1, gpus
        else:
            pods, per_pod = gpus // gpus_per_node, gpus_per_node
        duration = round(model.draw(gpus, rng), 3)
        priority = 1 if rng.random() < spec.priority_share else 0
        limit = max(duration, round_up_limit(duration * limits.uniform(lo, hi)))
        jobs.append(Job(f"job-{i:05d}", now, pods, per_pod, duration,
                        f"team-{rng.randrange(spec.queues)}", priority, product, limit))
    stretch = offered_load(jobs, cluster_gpus) / spec.load if spec.exact_load and len(jobs) > 1 else 1.0
    return [dataclasses.replace(j, arrival=round(j.arrival * stretch, 3)) for j in jobs]
