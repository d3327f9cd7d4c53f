"""The numbers the docs promise are the numbers the code runs with.

Each case names a doc, the phrase that promises a value, and the value the code uses; the phrase is
built from the code's value, so changing either side without the other fails here. (A read-only audit
found docs/operator.md promising "up to 8 rounds" per cycle while the cycle ran 64, and several
defaults that no test tied to their docs.)
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from kubegang.admission import CycleSettings
from kubegang.admission._cycle import BACKOFF_FIRST_SECONDS, BACKOFF_MAX_SECONDS, _backoff_seconds
from kubegang.agent.__main__ import _parser as agent_parser
from kubegang.backoff import Backoff
from kubegang.extender._settings import ExtenderSettings
from kubegang.extender._watch import ClusterFeed
from kubegang.operator.__main__ import parser, settings_from_args
from kubegang.operator._admission import MESSAGE_REFRESH_SECONDS
from kubegang.operator._run import EXIT_GRACE_SECONDS
from kubegang.operator._sources import GROUP_GONE_SECONDS
from kubegang.operator._supervisor import REPAIR_INTERVAL_SECONDS
from kubegang.operator._watches import CacheFeed
from kubegang.placement import DEFAULT_MIX, MILLI, TaskShape, WorkloadMix
from kubegang.quota import DEFAULT_RESERVE_AFTER_SECONDS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
OPERATOR = settings_from_args(parser().parse_args(["--extender-address", "127.0.0.1:1"]))
"""The operator's settings as its command line defaults them."""
EXTENDER = {field.name: field.default for field in dataclasses.fields(ExtenderSettings)}
"""The extender's setting defaults (its required TLS paths have none)."""



def _defaults(cls: type) -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()}


OPERATOR_FEED, EXTENDER_FEED = _defaults(CacheFeed), _defaults(ClusterFeed)
FLOOR = {field.name: field.default for field in dataclasses.fields(Backoff)}["floor_fraction"]
AGENT = agent_parser().parse_args([])
"""The agent's flags as its command line defaults them."""

CASES = [
    ("operator.md", f"up to {CycleSettings().max_rounds} rounds"),
    ("operator.md", f"`--renew-deadline` ({OPERATOR.renew_deadline_seconds:g} s)"),
    ("operator.md", f"`--lease-duration` ({OPERATOR.lease_duration_seconds:g} s)"),
    ("operator.md", f"`--retry-period` ({OPERATOR.retry_period_seconds:g} s)"),
    ("operator.md", f"takes more than {EXIT_GRACE_SECONDS:g} s"),
    ("operator.md", f"(free-GPU numbers move every cycle) at most every {MESSAGE_REFRESH_SECONDS:g} s"),
    ("operator.md", f"(`--creation-concurrency`, {OPERATOR.creation_concurrency} gangs)"),
    ("operator.md", f"Rate-limit defaults: {OPERATOR.api_qps:g} writes/s, bursts of {OPERATOR.api_burst}."),
    ("extender.md", f"The TTL (default {EXTENDER['reservation_ttl_seconds']:g} s"),
    ("extender.md", f"up to {EXTENDER['requeue_batch']} waiting GPU pods"),
    ("extender.md", f"asks `Repair` every {REPAIR_INTERVAL_SECONDS:g} s"),
    ("operator.md", f"ceiling {OPERATOR_FEED['retry_seconds']:g} s doubling up to "
                    f"{OPERATOR_FEED['max_retry_seconds']:g} s"),
    ("extender.md", f"between {FLOOR * float(EXTENDER_FEED['retry_seconds']):g} s and a ceiling that starts at "
                    f"{EXTENDER_FEED['retry_seconds']:g} s and doubles per consecutive failure up to "
                    f"{EXTENDER_FEED['max_retry_seconds']:g} s"),
    ("quota.md", f"`reserve_after_seconds` (default **{DEFAULT_RESERVE_AFTER_SECONDS / 3600:g} h**"),
    ("ray-and-pod-groups.md", f"{GROUP_GONE_SECONDS:g} s after the group's last pod"),
    ("ray-and-pod-groups.md", f"the GPUJob goes {GROUP_GONE_SECONDS:g} s after the last pod"),
    ("extender.md", f"`--max-body-bytes` ({EXTENDER['max_body_bytes'] / (1 << 20):g} MiB)"),
    ("extender.md", f"Every `--tls-reload-seconds` (default {EXTENDER['tls_reload_seconds']:g})"),
    ("agent.md", f"(`--poll-interval`, {AGENT.poll_interval:g} s)"),
    ("agent.md", f"`--resync-interval` ({AGENT.resync_interval:g} s)"),
    ("agent.md", f"(`--metrics-port`, {AGENT.metrics_port};"),
    ("operator.md", f"[--metrics-port {OPERATOR.metrics_port}] [--health-port {OPERATOR.health_port}]"),
    ("operator.md", f"`--health-port` ({OPERATOR.health_port}, off, by default"),
]




def _sig(value: float) -> str:
    """``value`` rounded as docs/placement.md rounds the benchmark: two significant digits."""
    return f"{float(f'{value:.2g}'):g}"


def _placement_bench_phrases(bench: dict[str, Any]) -> list[str]:
    """What docs/placement.md says of the run ``bench/placement/results.json`` records. (It quoted
    figures of an older run for a long time: 3.6 ms where the file said 0.13.)"""
    fabric, load, preemption = bench["fabric"], bench["load"], bench["preemption_16x8_in_one_leaf"]
    update = bench["incremental_update"]
    phrases = [
        f"`.venv/bin/python bench/placement/run.py --samples {bench['samples']}` (seed {bench['seed']}; "
        f"Python {bench['python']} on a",
        f"Fabric: {fabric['nodes']:,} nodes x {fabric['gpus'] // fabric['nodes']} GPUs, leaves of "
        f"{fabric['leaf_size']} nodes, {fabric['leaves_per_spine']} leaves per spine, {fabric['spines_per_block']} "
        f"spines per block; {load['occupancy']:.0%} random load ({load['background_pods']:,} pods, "
        f"{load['whole_free_nodes']:,} whole free nodes)",
        f"| incremental update (one allocate or release) | {_sig(update['p50_ms'])} | {_sig(update['p99_ms'])} | |",
        f"Compiling the index takes about {_sig(bench['compile_index_s'])} s and building the snapshot "
        f"{_sig(bench['build_snapshot_s'])} s",
        f"with all {preemption['candidates']:,} running pods as candidates: p50 {_sig(preemption['p50_ms'])} ms, "
        f"p99 {_sig(preemption['p99_ms'])} ms, {preemption['victims_mean']:g} victims "
        f"({preemption['gpus_evicted_mean']:g} GPUs).",
        f"every one of the {preemption['candidates']:,} running pods on {fabric['nodes']:,} nodes a candidate: "
        f"p50 {_sig(preemption['p50_ms'])} ms, p99 {_sig(preemption['p99_ms'])} ms",
        f"same victims, {preemption['victims_mean']:g} gangs and {preemption['gpus_evicted_mean']:g} GPUs",
    ]
    for row in bench["plan"]:
        (span,) = row["outcomes"]  # every sample of a case found the same span
        phrases.append(f"| {row['case']} | {_sig(row['p50_ms'])} | {_sig(row['p99_ms'])} | {span} |")
    return phrases


MIX = _defaults(WorkloadMix)
"""The FGD workload mix's defaults (docs/placement.md, "The mix")."""
CASES += [("placement.md", f"half-life {MIX['half_life']:,.0f} observations), re-derived every "
                           f"{MIX['refresh_every']} observations")]

PLACEMENT_BENCH = json.loads((REPO / "bench" / "placement" / "results.json").read_text())
CASES += [("placement.md", phrase) for phrase in _placement_bench_phrases(PLACEMENT_BENCH)]


@pytest.mark.parametrize(("doc", "phrase"), CASES, ids=[phrase for _, phrase in CASES])
def test_the_doc_states_the_value_the_code_uses(doc: str, phrase: str) -> None:
    text = " ".join((DOCS / doc).read_text().split())  # a phrase may be wrapped over two lines
    assert phrase in text, f"docs/{doc} does not say {phrase!r}"


def test_the_operators_backfill_threshold_defaults_to_48_hours_and_a_negative_one_means_never() -> None:
    """docs/quota.md: `--backfill-reserve-after` defaults to the core's 48 h; negative: never."""
    assert OPERATOR.backfill_reserve_after_seconds == DEFAULT_RESERVE_AFTER_SECONDS == 48 * 3600
    never = settings_from_args(parser().parse_args(["--extender-address", "127.0.0.1:1",
                                                    "--backfill-reserve-after", "-1"]))
    assert never.backfill_reserve_after_seconds is None


def test_a_failing_jobs_retries_double_from_1_second_up_to_5_minutes() -> None:
    """docs/operator.md: a job whose handling raised is retried after a delay doubling per failure up to
    5 min."""
    delays = [_backoff_seconds(n) for n in range(1, 12)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and delays[0] == BACKOFF_FIRST_SECONDS
    assert max(delays) == BACKOFF_MAX_SECONDS == 300 and delays[-1] == 300
    text = " ".join((DOCS / "operator.md").read_text().split())
    assert f"up to {BACKOFF_MAX_SECONDS / 60:g} min" in text


def test_the_default_workload_mix_is_whole_gpu_pods_of_1_2_4_and_8_gpus_equally_likely() -> None:
    """docs/placement.md: before anything is observed the mix is "whole-GPU pods of 1, 2, 4 and 8 GPUs,
    equally likely"."""
    sizes = [shape.gpus for shape, _ in DEFAULT_MIX]
    assert all(shape == TaskShape(shape.gpus) and shape.gpu_milli == MILLI for shape, _ in DEFAULT_MIX)
    assert len({p for _, p in DEFAULT_MIX}) == 1 and sum(p for _, p in DEFAULT_MIX) == pytest.approx(1)
    phrase = f"whole-GPU pods of {', '.join(map(str, sizes[:-1]))} and {sizes[-1]} GPUs, equally likely"
    assert phrase in " ".join((DOCS / "placement.md").read_text().split())
    assert WorkloadMix().distribution() == DEFAULT_MIX


def test_the_mix_halves_an_observation_after_its_half_life_and_re_derives_every_refresh() -> None:
    """The defaults the doc states are what a default ``WorkloadMix`` does, not only its signature."""
    mix = WorkloadMix()
    old, new, filler = TaskShape(1), TaskShape(8), TaskShape(2)
    mix.observe(old)
    for _ in range(int(MIX["half_life"]) - 1):  # type: ignore[call-overload]
        mix.observe(filler, 0.0)  # ages ``old`` without weighing anything itself
    mix.observe(new)  # half_life observations after ``old``
    mix.refresh()
    p = dict(mix.distribution())
    assert p[old] / p[new] == pytest.approx(0.5)
    fresh = WorkloadMix()
    fresh.observe(old)  # the first observation derives at once
    version = fresh.version
    for _ in range(int(MIX["refresh_every"]) - 1):  # type: ignore[call-overload]
        fresh.observe(old)
    assert fresh.version == version
    fresh.observe(old)
    assert fresh.version == version + 1
