"""The openb variants built from the trace (``bench.sim.openb_variants``): what each sample holds."""

from __future__ import annotations

import random

from bench.sim import _openb as openb
from bench.sim import load_cluster
from bench.sim.openb_variants import gpu_typed, gpushare_heavy


def test_the_sharing_heavy_sample_keeps_size_and_cpu_only_tasks_and_80_percent_of_gpu_tasks_share() -> None:
    tasks = openb.load_tasks("default")
    heavy = gpushare_heavy(tasks, 0.8, random.Random(1))
    gpu = [t for t in heavy if t.num_gpu]
    assert len(heavy) == len(tasks)
    assert sum(1 for t in heavy if t.num_gpu == 0) == sum(1 for t in tasks if t.num_gpu == 0)
    assert abs(sum(t.shared for t in gpu) / len(gpu) - 0.8) < 0.001
    assert {(t.num_gpu, t.gpu_milli) for t in heavy} <= {(t.num_gpu, t.gpu_milli) for t in tasks}


def test_the_typed_sample_constrains_a_third_of_gpu_tasks_to_models_that_could_hold_them() -> None:
    cluster = load_cluster("openb")
    tasks = openb.load_tasks("default")
    typed = gpu_typed(tasks, 0.33, cluster, random.Random(1))
    gpu = [t for t in typed if t.num_gpu]
    share = sum(1 for t in gpu if t.gpu_spec) / len(gpu)
    assert 0.31 < share < 0.35
    assert [t.name for t in typed] == [t.name for t in tasks]
    nodes = cluster.topology.nodes
    for t in [t for t in gpu if t.gpu_spec][::25]:
        assert any(n.gpus[0].product in t.gpu_spec and len(n.gpus) >= t.num_gpu and n.cpu_milli >= t.cpu_milli
                   and n.memory_mib >= t.memory_mib for n in nodes if n.gpus), t
    assert any(t.gpu_spec == ("V100M16", "V100M32") for t in gpu)
