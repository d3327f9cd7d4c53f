"""``bench.sim.openb_waste``: what is not allocated at an arrived point, named by kind."""

from __future__ import annotations

from bench.sim import _openb as openb
from bench.sim import load_cluster
from bench.sim.openb_waste import LEFTOVER, STRANDED, UNASKED, measure, render, task_kind


def _task(name: str, cpu: int, gpus: int, milli: int) -> openb.Task:
    return openb.Task(name, cpu, 1024, gpus, milli if gpus else 0)


def test_a_share_leaves_a_leftover_and_a_whole_gpu_task_that_fits_nowhere_is_dropped() -> None:
    cluster = load_cluster("openb", limit=2)  # two nodes of one V100 each
    tasks = [_task("a", 1000, 1, 810), _task("b", 1000, 1, 1000), _task("c", 1000, 1, 1000),
             _task("d", 1000, 1, 1000)]
    waste = measure(cluster, tasks, openb.workload_mix(tasks), at=100.0)
    assert waste.allocation == (0.81 + 1.0) / 2 * 100
    assert waste.first_drop == (0.81 + 2.0) / 2 * 100  # "c" arrived at 90.5% and was the first dropped
    assert waste.arrived == waste.first_drop  # the replay stopped once 100% had arrived: "d" never came
    assert round(waste.free[LEFTOVER], 6) == 0.19
    assert dict(waste.leftovers) == {150: 1}
    assert waste.free[STRANDED] == 0 and waste.free[UNASKED] == 0
    assert waste.dropped == {"1 GPU": (1, 1.0)}


def test_a_whole_gpu_on_a_node_without_cpu_is_stranded_not_free_for_the_mix() -> None:
    cluster = load_cluster("openb", limit=2)
    tasks = [_task("cpu", 8000, 0, 0), _task("gpu", 1000, 1, 1000), _task("big", 9000, 1, 500)]
    waste = measure(cluster, tasks, openb.workload_mix(tasks), at=100.0)
    assert waste.free == {LEFTOVER: 0.0, STRANDED: 1.0, UNASKED: 0.0}
    assert waste.dropped == {"share 500": (1, 0.5)}
    text = render("tiny", 100.0, [(1, waste)])
    assert "| 1 | 50.00 | 75.0 | 0.0 | 1 | 0 |" in text and "| share 500 | 1.0 | 0.5 |" in text


def test_task_kinds_name_count_share_and_models() -> None:
    assert task_kind(openb.Task("x", 1, 1, 0, 0)) == "cpu-only"
    assert task_kind(openb.Task("x", 1, 1, 1, 470, ("T4",))) == "share 470 (models T4)"
    assert task_kind(openb.Task("x", 1, 1, 8, 1000)) == "8 GPUs"
