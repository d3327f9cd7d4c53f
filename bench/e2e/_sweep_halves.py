"""One half of the sweep on the real control plane: the training gangs first, then the sweep driver.

Each half: a fresh namespace; (kubegang) the two-leaf GPUQueue tree; the training gangs applied with
kubectl and waited for until every pod runs; then list+watch of the half's pods (and GPUJobs) and the
sweep driver, which keeps ``concurrency`` trials in flight until every trial is over. The CPU of the
cluster's processes and the API server's writes are counted over the sweep only, not the set-up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench._sweep_overhead import TrialTimes, overhead
from bench.e2e import _harness as harness
from bench.e2e import _kube as kube
from bench.e2e import _procstats as procstats
from bench.e2e import _sweep_workload as workload
from bench.e2e._kube import Event
from bench.e2e._record import FINISHED, JobTimes, PodTimes, Recorder
from bench.e2e._sweep_driver import SweepDriver, TrialSubmission
from bench.e2e._workload import JOB_LABEL

GPUQUEUES = "/apis/kubegang.io/v1alpha1/gpuqueues"


def percentiles(values: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    """p50, p95, p99 and max (nearest rank), times ``scale``; only the count when there are none."""
    xs = sorted(values)
    out: dict[str, Any] = {"n": len(xs)}
    if xs:
        def at(q: float) -> float:
            return round(xs[min(len(xs) - 1, int(q * len(xs)))] * scale, digits)
        out.update({"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "max": round(xs[-1] * scale, digits),
                    "mean": round(sum(xs) / len(xs) * scale, digits)})
    return out


def _training_running(target: harness.Target, namespace: str, expected: int) -> Callable[[], bool]:
    def check() -> bool:
        pods, _ = kube.list_items(target.api, harness.PODS.format(ns=namespace))
        return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") >= expected
    return check


def apply_queues(target: harness.Target, docs: Sequence[dict[str, Any]]) -> None:
    """Apply the GPUQueues and wait until the operator wrote their status (it has the tree)."""
    kube.kubectl(target.kubectl, target.kubeconfig, "apply", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(docs)}))
    names = {d["metadata"]["name"] for d in docs}

    def seen() -> bool:
        items, _ = kube.list_items(target.api, GPUQUEUES)
        return names <= {q["metadata"]["name"] for q in items if "usage" in (q.get("status") or {})}

    kube.wait_until("the operator to observe the sweep's GPUQueues", seen, 60)


def delete_queues(target: harness.Target) -> None:
    kube.kubectl(target.kubectl, target.kubeconfig, "delete", "gpuqueue", *workload.QUEUES,
                 "--ignore-not-found", "--wait=false")


def _start_training(target: harness.Target, plan: workload.SweepPlan, namespace: str, kubegang: bool,
                    timeout_s: float) -> float:
    t0 = time.monotonic()
    if kubegang:
        apply_queues(target, workload.queues(plan, harness.gpu_product(target), namespace))
        docs = workload.training_gpujobs(plan, namespace)
    else:
        docs = workload.training_pods(plan, namespace)
    kube.apply_parallel(target.kubectl, target.kubeconfig, [docs])
    expected = sum(j.pods for j in plan.training)
    kube.wait_until(f"{expected} training pods Running", _training_running(target, namespace, expected), timeout_s)
    return round(time.monotonic() - t0, 1)


def _trial_of(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_LABEL)


def _trial_record(sub: TrialSubmission, pod: PodTimes | None, job: JobTimes | None,
                  pred_pod: PodTimes | None, pred: TrialSubmission | None) -> dict[str, Any]:
    """One trial's stamps (seconds after t0), what the overhead and the step breakdown are made of."""
    return {
        "name": sub.name, "predecessor": sub.predecessor, "submitted": sub.submitted,
        "job_created": job.created if job else None,
        "admitted": job.phases.get("Admitted") if job else None,
        "queued": job.phases.get("Queued") if job else None,
        "pod_created": pod.created if pod else None, "bound": pod.bound if pod else None,
        "running": pod.running if pod else None, "finished": pod.finished if pod else None,
        "completed": sub.completed, "slot_freed": pred_pod.finished if pred_pod else None,
        "predecessor_completed": pred.completed if pred else None, "error": sub.error,
    }


def _diffs(records: Sequence[dict[str, Any]], end: str, start: str) -> list[float]:
    return [r[end] - r[start] for r in records if r.get(end) is not None and r.get(start) is not None]


STEPS: tuple[tuple[str, str, str], ...] = (
    ("submit → GPUJob seen", "job_created", "submitted"),
    ("GPUJob seen → Admitted", "admitted", "job_created"),
    ("Admitted → pod created", "pod_created", "admitted"),
    ("submit → pod created", "pod_created", "submitted"),
    ("pod created → bound", "bound", "pod_created"),
    ("bound → Running", "running", "bound"),
    ("pod finished → driver saw it over", "completed", "finished"),
    ("driver saw it over → next submitted", "submitted", "predecessor_completed"),
)
"""The start latency and the idle gap cut into the steps the watches can see, in order."""


def steps(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for label, end, start in STEPS:
        values = _diffs(records, end, start)
        if values:
            out[label] = percentiles(values, 1000.0, 1)
    return out


def run_half(target: harness.Target, plan: workload.SweepPlan, namespace: str, settings: harness.HalfSettings,
             kubegang: bool, count_requests: bool = True) -> dict[str, Any]:
    """The whole half: training, the sweep, the audit; the namespace is left for the caller to clean.

    ``count_requests`` reads the API server's request counters before and after (parsing its whole
    /metrics page, seconds on a busy machine; the smoke test leaves it out)."""
    harness._ensure_namespace(target, namespace)
    training_s = _start_training(target, plan, namespace, kubegang, settings.timeout_s)
    names = workload.trial_names(plan.trials)
    wanted = set(names)
    path = (harness.GPUJOBS if kubegang else harness.PODS).format(ns=namespace)

    def manifest(name: str) -> dict[str, object]:
        if kubegang:
            return workload.trial_gpujob(name, namespace, plan.runtime_s)
        return workload.trial_pod(name, namespace, plan.runtime_s)

    before, verbs_before = procstats.sample_cluster(target.cluster_dir), harness.extender_verbs(target.cluster_dir)
    requests_before = harness.apiserver_requests(target) if count_requests else {}
    rec = Recorder(time.monotonic())
    driver = SweepDriver(target.api, path, manifest, names, plan.concurrency, rec.t0)
    pod_of: dict[str, str] = {}

    def on_pod(event: Event) -> None:
        rec.on_pod(event)
        _, _, obj = event
        trial = _trial_of(obj)
        if trial not in wanted:
            return
        pod_of.setdefault(trial, obj["metadata"]["uid"])
        if not kubegang and (obj.get("status") or {}).get("phase") in FINISHED:
            driver.completed(trial)

    def on_job(event: Event) -> None:
        rec.on_job(event)
        _, _, obj = event
        name = obj["metadata"]["name"]
        if name in wanted and (obj.get("status") or {}).get("phase") in FINISHED:
            driver.completed(name)

    watches = [kube.Watch(target.api, harness.PODS.format(ns=namespace), on_pod)]
    if kubegang:
        watches.append(kube.Watch(target.api, harness.GPUJOBS.format(ns=namespace), on_job))
    for w in watches:
        w.start()
    start = time.monotonic()
    wall_t0 = time.time()
    rec.t0 = driver.t0 = start
    try:
        complete = driver.run(settings.timeout_s, settings.stall_s)
    finally:
        driver.close()
    wall = time.monotonic() - start
    time.sleep(0.5)  # the last events on the wire
    after = procstats.sample_cluster(target.cluster_dir)
    verbs_after = harness.extender_verbs(target.cluster_dir)
    requests = (harness.apiserver_window(requests_before, harness.apiserver_requests(target), plan.trials,
                                         plan.trials) if count_requests else None)
    for w in watches:
        w.stop(timeout=0)  # what they saw is taken below; a quiet stream would hold us up to 10 s

    pods = {p.uid: p for p in rec.pod_list()}
    jobs = {j.name: j for j in rec.job_list()}

    def pod(name: str | None) -> PodTimes | None:
        return pods.get(pod_of.get(name, "")) if name else None

    records = []
    for name in names:
        sub = driver.trials[name]
        pred = driver.trials.get(sub.predecessor) if sub.predecessor else None
        records.append(_trial_record(sub, pod(name), jobs.get(name), pod(sub.predecessor), pred))
    timed = [TrialTimes(r["submitted"], r["running"], r["finished"], r["slot_freed"]) for r in records
             if None not in (r["submitted"], r["running"], r["finished"])
             and (r["predecessor"] is None or r["slot_freed"] is not None)]
    result: dict[str, Any] = {
        "namespace": namespace, "complete": complete and len(timed) == plan.trials,
        "training_ready_s": training_s, "wall_s": round(wall, 2),
        "t0_unix": round(wall_t0, 4),  # to line the stamps up with the processes' logs "concurrency": plan.concurrency,
        "trials_submitted": sum(1 for r in records if r["submitted"] is not None and not r["error"]),
        "trials_finished": len(timed),
        "submit_errors": driver.errors()[:10],
        "trials_queued_first": sum(1 for r in records if r["queued"] is not None) if kubegang else None,
        "makespan_s": round(max((r["finished"] for r in records if r["finished"] is not None), default=0.0), 2),
        "start_latency_s": percentiles(_diffs(records, "running", "submitted")),
        "idle_gap_s": percentiles([max(0.0, v) for v in _diffs(records, "submitted", "slot_freed")]),
        "trial_runtime_measured_s": percentiles(_diffs(records, "finished", "running")),
        "steps_ms": steps(records),
        "processes": procstats.window(before, after), "apiserver": requests,
        "audit": harness.audit(target, namespace if kubegang else None),
        "watch_errors": [e for w in watches for e in w.errors][:10],
        "trials": [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in records],
    }
    if kubegang:
        result["extender"] = harness.extender_window(verbs_before, verbs_after, plan.trials)
        result["pods_deleted_during_run"] = sum(1 for p in pods.values() if p.deleted is not None)
        phases: dict[str, int] = {}
        for name in names:
            phase = jobs[name].phase if name in jobs else "(not seen)"
            phases[phase] = phases.get(phase, 0) + 1
        result["trial_job_phases"] = phases
    if timed:
        o = overhead(timed)
        result["overhead"] = {
            "ratio": round(o.ratio, 5), "lost_seconds_per_trial": round(o.lost_seconds_per_trial, 4),
            "start_latency_gpu_seconds": round(o.start_latency_gpu_seconds, 3),
            "idle_gpu_seconds": round(o.idle_gpu_seconds, 3), "trial_gpu_seconds": round(o.trial_gpu_seconds, 3),
            "ratio_at_seed_runtime": round(o.ratio_at_runtime(workload.SEED_TRIAL_RUNTIME_S), 6),
        }
    return result
