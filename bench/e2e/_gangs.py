"""What happened to each gang, the same way for every half: where its pods landed, whether it was ever
bound in part, and how much of the cluster was allocated while jobs waited.

One more list+watch of the half's pods (the harness's own Recorder keeps no labels), started before
the burst and stopped before cleanup; every pod is grouped by the job label all three halves put on
it (``bench.kubegang.io/job``), so kubegang's, Kueue's and plain pods are judged by one rule.

- **One leaf / one NVLink domain:** a whole multi-pod gang whose bound nodes share the domain, with
  domains read from node labels by the placement core's own rule (``kubegang.topology.domain_chain``:
  a node without an NVLink label is its own NVLink domain, which is what the bench shapes are).
- **Partial gang:** a multi-pod gang with some but not all of its pods bound. Binding a whole gang
  takes a moment pod by pod in every system, so a gang counts as partial when that state lasted
  longer than ``PARTIAL_GRACE_S`` or was still so when the half ended.
- **GPU allocation while jobs wait:** the GPUs of bound, unfinished pods over the cluster's GPUs,
  averaged over time from the first bind until the last job was whole (in a contended burst, the
  span in which some job is always waiting); and, of those, the GPUs held by gangs not yet whole
  (allocated, but no gang can run on them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.e2e import _kube as kube
from bench.e2e._kube import Api, Event
from bench.e2e._record import FINISHED
from bench.e2e._workload import GPU, JOB_LABEL, BenchJob
from kubegang.levels import Level
from kubegang.topology import NodeInfo, TopologyLabels, domain_chain

PARTIAL_GRACE_S = 5.0
"""A gang bound in part for longer than this (or at the end) counts as partial."""


@dataclass
class PodTrace:
    """One pod of the burst as the watch saw it; times are ``time.monotonic()`` when read."""

    job: str
    gpus: int
    node: str | None = None
    bound: float | None = None
    ended: float | None = None
    """First seen Succeeded, Failed or deleted: its GPUs are free again."""


def _gpus(pod: Mapping[str, Any]) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources", {})
        total += int(res.get("requests", {}).get(GPU) or res.get("limits", {}).get(GPU) or 0)
    return total


class GangObserver:
    """Thread-safe sink for one namespace's pod events, keyed by pod UID."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, PodTrace] = {}
        self.stopped_at: float | None = None

    def on_pod(self, event: Event) -> None:
        at, kind, obj = event
        meta = obj["metadata"]
        job = (meta.get("labels") or {}).get(JOB_LABEL)
        if job is None:
            return
        node = obj.get("spec", {}).get("nodeName")
        with self._lock:
            pod = self._pods.get(meta["uid"])
            if pod is None:
                pod = self._pods[meta["uid"]] = PodTrace(job, _gpus(obj))
            if node and pod.bound is None:
                pod.bound, pod.node = at, node
            if pod.ended is None and (kind == "DELETED" or obj.get("status", {}).get("phase") in FINISHED):
                pod.ended = at

    def traces(self) -> list[PodTrace]:
        with self._lock:
            return [PodTrace(**vars(p)) for p in self._pods.values()]


@contextmanager
def observed(api: Api, namespace: str) -> Iterator[GangObserver]:
    """Watch ``namespace``'s pods for the ``with`` block (the namespace need not exist yet)."""
    sink = GangObserver()
    watch = kube.Watch(api, f"/api/v1/namespaces/{namespace}/pods", sink.on_pod)
    watch.start()
    try:
        yield sink
    finally:
        sink.stopped_at = time.monotonic()
        watch.stop(timeout=0)  # nothing it reads after this counts; an idle stream ends by itself


def observe(api: Api, namespace: str, jobs: Sequence[BenchJob], capacity_gpus: int,
            domains: Mapping[str, Mapping[Level, str]], half: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one half under a gang observer; its result with ``gangs`` (``gang_report``) added."""
    with observed(api, namespace) as sink:
        result = half()
    assert sink.stopped_at is not None
    return {**result, "gangs": gang_report(sink.traces(), jobs, capacity_gpus, domains, sink.stopped_at)}


def node_domains(nodes: Sequence[Mapping[str, Any]],
                 labels: TopologyLabels | None = None) -> dict[str, dict[Level, str]]:
    """Each node's domain at every level, from its labels (the placement core's rule)."""
    labels = labels or TopologyLabels()
    out = {}
    for n in nodes:
        name = n["metadata"]["name"]
        chain = domain_chain(NodeInfo(name, labels=dict(n["metadata"].get("labels") or {})), labels)
        out[name] = dict(chain)
    return out


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _time_mean(steps: Sequence[tuple[float, int]], start: float, end: float) -> float | None:
    """Time-weighted mean of a step function given as (time, change) pairs, over [start, end]."""
    if end <= start:
        return None
    level, area, last = 0, 0.0, start
    for t, change in sorted(steps):
        if t > end:
            break
        if t > start:
            area += level * (t - last)
            last = t
        level += change
    area += level * (end - last)
    return area / (end - start)


def gang_report(traces: Sequence[PodTrace], jobs: Sequence[BenchJob], capacity_gpus: int,
                domains: Mapping[str, Mapping[Level, str]], end: float) -> dict[str, Any]:
    """The figures in the module docstring for one half; ``end`` is when its observation stopped."""
    bound: dict[str, list[PodTrace]] = {}
    for p in traces:
        if p.bound is not None:
            bound.setdefault(p.job, []).append(p)
    first_bound = {name: min(p.bound for p in pods if p.bound is not None) for name, pods in bound.items()}
    # When each job had every pod bound (the moment its gang became whole).
    whole_at = {j.name: max(p.bound for p in bound[j.name] if p.bound is not None)
                for j in jobs if len(bound.get(j.name, ())) >= j.pods}
    gangs = [j for j in jobs if j.pods > 1]
    in_leaf = in_nvlink = partial = partial_at_end = 0
    longest = 0.0
    for job in gangs:
        if job.name not in first_bound:
            continue
        if job.name in whole_at:
            span = whole_at[job.name] - first_bound[job.name]
            nodes = {p.node for p in bound[job.name] if p.node}
            in_leaf += len({domains.get(n, {}).get(Level.LEAF, n) for n in nodes}) == 1
            in_nvlink += len({domains.get(n, {}).get(Level.NVLINK, n) for n in nodes}) == 1
        else:
            span = end - first_bound[job.name]
            partial_at_end += 1
        longest = max(longest, span)
        partial += span > PARTIAL_GRACE_S or job.name not in whole_at

    allocated: list[tuple[float, int]] = []
    held: list[tuple[float, int]] = []
    for pods in bound.values():
        for p in pods:
            assert p.bound is not None
            allocated.append((p.bound, p.gpus))
            if p.ended is not None:
                allocated.append((p.ended, -p.gpus))
            # Held by a gang that is not whole yet: from the pod's bind until the gang is whole (or the pod ends).
            until = min(whole_at.get(p.job, end), p.ended if p.ended is not None else end)
            if until > p.bound:
                held += [(p.bound, p.gpus), (until, -p.gpus)]
    first = min(first_bound.values(), default=None)
    last = max(whole_at.values()) if whole_at and len(whole_at) == len(jobs) else end
    mean_allocated = _time_mean(allocated, first, last) if first is not None else None
    mean_held = _time_mean(held, first, last) if first is not None else None
    whole = sum(1 for j in gangs if j.name in whole_at)
    return {
        "multi_pod_gangs": len(gangs), "whole_gangs": whole,
        "share_in_one_leaf": _share(in_leaf, whole), "share_in_one_nvlink_domain": _share(in_nvlink, whole),
        "partial_gangs": partial, "partial_gangs_at_end": partial_at_end,
        "longest_partial_s": round(longest, 2),
        "waiting_window_s": round(last - first, 2) if first is not None else None,
        "gpu_allocation_while_waiting": _share_of(mean_allocated, capacity_gpus),
        "gpus_held_by_incomplete_gangs": _share_of(mean_held, capacity_gpus),
    }


def _share_of(mean_gpus: float | None, capacity_gpus: int) -> float | None:
    return round(mean_gpus / capacity_gpus, 4) if mean_gpus is not None and capacity_gpus else None
