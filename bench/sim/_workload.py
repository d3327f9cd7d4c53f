"""Multi-node gang workloads, generated from published statistics of real GPU clusters.

No public trace of a multi-node training cluster comes with its fabric, so the gang workloads are
synthetic, drawn from distributions fitted to published numbers:

- ``kalos``: Shanghai AI Lab's Acme traces (Hu et al., "Characterization of Large Language Model
  Development in the Datacenter", NSDI '24): on the Kalos cluster the median job asks for 1 GPU,
  the mean is about 27 GPUs and the largest jobs take 1,024. Sizes are powers of two with the
  weights in ``KALOS_SIZES`` (median 1, mean ~27 before capping at the cluster).
- ``philly``: Microsoft Philly (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters
  for DNN Training Workloads", USENIX ATC '19): mean about 1.9 GPUs per job, few multi-node jobs.

A job of ``g`` GPUs on nodes of ``n`` GPUs becomes one pod of ``g`` GPUs when ``g <= n``, else
``g / n`` pods of ``n`` GPUs (whole nodes, as data-parallel training is deployed). Kalos's largest
jobs (1,024 GPUs) are 42% of its 2,416 GPUs, so sizes are capped at the largest power of two not
above ``max_share`` (default half) of the simulated cluster; the capped mean is reported.

Durations are log-normal (median ``median_hours``, sigma ``duration_sigma``, capped at
``max_hours``): both traces report heavy-tailed run times with medians of minutes to an hour.
Arrivals are Poisson, with the rate chosen so that the offered load (GPU-hours requested per hour
of arrivals, over the cluster's GPUs) is ``load``; above 1 the queue builds up, which is the regime
where placement and fragmentation matter. Jobs are spread round-robin-at-random over ``queues``
teams; ``priority_share`` of them (0 by default) get priority 1 so that preemption can be exercised.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
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
    median_hours: float = 1.0
    duration_sigma: float = 1.2
    max_hours: float = 48.0
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
    4x as many are needed before the cluster saturates."""
    return GangWorkload(sizes=sizes, jobs=jobs * (4 if sizes == "philly" else 1), seed=seed)


def generate(spec: GangWorkload, cluster_gpus: int, gpus_per_node: int, product: str | None = None) -> list[Job]:
    """The jobs of ``spec`` for a cluster of ``cluster_gpus`` GPUs in nodes of ``gpus_per_node``."""
    try:
        table = SIZE_TABLES[spec.sizes]
    except KeyError:
        raise ValueError(f"GangWorkload.sizes must be one of {', '.join(SIZE_TABLES)}, got {spec.sizes!r}") from None
    if spec.jobs < 1 or spec.load <= 0 or spec.queues < 1:
        raise ValueError("GangWorkload.jobs, load and queues must be positive")
    rng = random.Random(spec.seed)
    sizes = sorted(table)
    weights = [table[s] for s in sizes]
    mu = math.log(spec.median_hours * 3600.0)
    max_s = spec.max_hours * 3600.0
    cap = spec.size_cap(cluster_gpus)
    _, mean_gpus = size_stats(table, cap)
    # E[duration] of the capped log-normal, estimated by sampling with an independent generator.
    probe = random.Random(spec.seed + 1_000_003)
    mean_duration = sum(min(probe.lognormvariate(mu, spec.duration_sigma), max_s) for _ in range(20_000)) / 20_000
    rate = spec.load * cluster_gpus / (mean_gpus * mean_duration)  # jobs per second
    jobs: list[Job] = []
    now = 0.0
    for i in range(spec.jobs):
        now += rng.expovariate(rate)
        gpus = min(rng.choices(sizes, weights)[0], cap)
        if gpus <= gpus_per_node:
            pods, per_pod = 1, gpus
        else:
            pods, per_pod = gpus // gpus_per_node, gpus_per_node
        duration = min(rng.lognormvariate(mu, spec.duration_sigma), max_s)
        priority = 1 if rng.random() < spec.priority_share else 0
        jobs.append(Job(f"job-{i:05d}", round(now, 3), pods, per_pod, round(max(duration, 60.0), 3),
                        f"team-{rng.randrange(spec.queues)}", priority, product))
    return jobs
