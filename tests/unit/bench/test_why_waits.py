"""The mechanism docs/benchmarks/why-kubegang-waits.md reports: the cycle's backfill walk is max_rounds deep."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.sim import Job, KubegangPolicy, load_cluster, simulate
from bench.sim.why_waits import FitButWaiting
from kubegang.admission import CycleSettings

HOUR = 3600.0


def _jobs() -> list[Job]:
    # 4 nodes: "long" holds 3 for 10 h; two whole-cluster gangs head the queue; a 1-node job behind them fits.
    def gang(job_id: str, arrival: float, pods: int, duration: float) -> Job:
        return Job(job_id, arrival, pods, 8, duration, "team-0", 0, "NVIDIA-H100-80GB-HBM3")

    return [gang("long", 0.0, 3, 10 * HOUR), gang("big", 1.0, 4, HOUR), gang("big2", 2.0, 4, HOUR),
            gang("small", 3.0, 1, HOUR)]


def test_a_job_behind_more_blocked_heads_than_max_rounds_waits_although_it_fits() -> None:
    cluster = load_cluster("superpod-h100", limit=4)
    shallow = FitButWaiting(KubegangPolicy(max_rounds=2))
    result = simulate(shallow, cluster, _jobs())
    assert result.started["small"] == 12 * HOUR  # not reached: it starts after "long", "big", "big2"
    assert shallow.job_seconds == pytest.approx(10 * HOUR - 3.0)  # it fitted the whole time
    deep = FitButWaiting(KubegangPolicy(max_rounds=8))
    assert simulate(deep, cluster, _jobs()).started["small"] == 3.0
    assert deep.job_seconds == 0.0


def test_the_simulated_operator_runs_the_cycle_defaults() -> None:
    assert KubegangPolicy().settings.max_rounds == CycleSettings().max_rounds


DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_the_analysis_page_links_resolve_and_quotes_the_generated_experiment_rows() -> None:
    page = (DOCS / "benchmarks-analysis.md").read_text()
    for link in re.findall(r"\]\(([^)#]+\.md)\)", page):
        assert (DOCS / link).is_file(), link
    generated = (DOCS / "benchmarks" / "why-kubegang-waits.md").read_text()
    section = generated.split("## The idea", 1)[1].split("Absolute figures", 1)[0]
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[2:]) for line in section.splitlines()
            if line.startswith("| ") and "shape" not in line}
    # The section on the idea the tool now measures quotes the generated table, whole.
    section = page.split("## Predicted run times for tenants", 1)[1]
    table = section.split("| shape | workload | alloc (arrivals) points |", 1)[1].split("\n\n", 1)[0]
    quoted = {tuple(c.strip().replace("−", "-") for c in line.strip("|").split("|")[2:])
              for line in table.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows and quoted == rows
