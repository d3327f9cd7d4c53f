"""What the watches saw: per pod and per job, when each transition that we measure first happened.

Times are ``time.monotonic()`` at the moment the watch event was read, relative to the start of the
burst (the moment the first ``kubectl apply`` was launched).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from bench.e2e._kube import Event

FINISHED = ("Succeeded", "Failed")


@dataclass
class PodTimes:
    uid: str
    name: str
    created: float
    bound: float | None = None
    running: float | None = None
    node: str | None = None
    deleted: float | None = None
    finished: float | None = None
    """First seen Succeeded or Failed: the GPUs are free again."""


@dataclass
class JobTimes:
    name: str
    created: float
    phases: dict[str, float] = field(default_factory=dict)
    """First time each status.phase was seen."""
    phase: str = ""
    reason: str = ""


def _started(phases: dict[str, float]) -> float | None:
    """When the job first ran: phase Running, or Succeeded if Running was never observed."""
    return phases.get("Running", phases.get("Succeeded"))


class Recorder:
    """Thread-safe sink for pod and GPUJob watch events of one namespace."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self._lock = threading.Lock()
        self.pods: dict[str, PodTimes] = {}
        self.jobs: dict[str, JobTimes] = {}

    def on_pod(self, event: Event) -> None:
        at, kind, obj = event
        t = at - self.t0
        meta, spec, status = obj["metadata"], obj.get("spec", {}), obj.get("status", {})
        with self._lock:
            pod = self.pods.get(meta["uid"])
            if pod is None:
                pod = self.pods[meta["uid"]] = PodTimes(meta["uid"], meta["name"], t)
            if spec.get("nodeName") and pod.bound is None:
                pod.bound, pod.node = t, spec["nodeName"]
            if status.get("phase") in ("Running", *FINISHED) and pod.running is None:
                pod.running = t
            if status.get("phase") in FINISHED and pod.finished is None:
                pod.finished = t
            if kind == "DELETED" and pod.deleted is None:
                pod.deleted = t

    def on_job(self, event: Event) -> None:
        at, kind, obj = event
        t = at - self.t0
        name = obj["metadata"]["name"]
        status: dict[str, Any] = obj.get("status") or {}
        with self._lock:
            job = self.jobs.get(name)
            if job is None:
                job = self.jobs[name] = JobTimes(name, t)
            phase = str(status.get("phase") or "")
            if phase:
                job.phases.setdefault(phase, t)
                job.phase = phase
                true = [c for c in status.get("conditions", []) if c.get("status") == "True"]
                job.reason = "; ".join(f"{c.get('type')}/{c.get('reason')}: {c.get('message', '')}" for c in true)
            if kind == "DELETED":
                job.phase = "Deleted"

    # -- views (copies taken under the lock) -----------------------------------------------------
    def pod_list(self) -> list[PodTimes]:
        with self._lock:
            return [PodTimes(**vars(p)) for p in self.pods.values()]

    def job_list(self) -> list[JobTimes]:
        with self._lock:
            return [JobTimes(j.name, j.created, dict(j.phases), j.phase, j.reason) for j in self.jobs.values()]

    def running_pods(self) -> int:
        with self._lock:
            return sum(1 for p in self.pods.values() if p.running is not None and p.deleted is None)

    def started_jobs(self) -> int:
        with self._lock:
            return sum(1 for j in self.jobs.values() if j.phase in ("Running", "Succeeded"))

    def job_start_times(self) -> list[float]:
        return sorted(t for j in self.job_list() if (t := _started(j.phases)) is not None)


def rate(times: list[float], expected: int) -> dict[str, Any]:
    """How fast ``times`` (seconds after the burst began) arrived.

    ``overall_per_s``: all of them over the time the last one took; ``steady_per_s``: the middle 80%
    (10th to 90th), which leaves out start-up and stragglers; ``peak_5s_per_s``: the busiest 5-second
    window.
    """
    ts = sorted(times)
    n = len(ts)
    out: dict[str, Any] = {"count": n, "expected": expected, "complete": n >= expected > 0}
    if not ts:
        return out
    lo, hi = ts[n // 10], ts[min(n - 1, (9 * n) // 10)]
    steady = ((9 * n) // 10 - n // 10) / (hi - lo) if hi > lo else None
    peak, j = 0, 0
    for i, t in enumerate(ts):
        while ts[j] < t - 5.0:
            j += 1
        peak = max(peak, i - j + 1)
    out.update({
        "first_s": round(ts[0], 3), "p50_s": round(ts[n // 2], 3), "last_s": round(ts[-1], 3),
        "overall_per_s": round(n / ts[-1], 2) if ts[-1] > 0 else None,
        "steady_per_s": round(steady, 2) if steady else None,
        "peak_5s_per_s": round(peak / 5.0, 2),
    })
    return out
