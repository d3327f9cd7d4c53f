"""The two halves of the benchmark on one control plane: the burst through kubegang, and the same pods
as plain pods through kube-scheduler alone.

Each half: a fresh namespace, list+watch started, ``kubectl apply`` of the burst in parallel files,
wait until everything runs (or the timeout), audit GPU commitments per node, record CPU and memory
of the cluster's processes over the window, then delete what it made and wait until the GPUs are free.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import resource
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bench.e2e import _kube as kube
from bench.e2e import _procstats as procstats
from bench.e2e._profile import Profiler
from bench.e2e._record import FINISHED, Recorder, rate
from bench.e2e._workload import (
    GPU,
    BenchJob,
    baseline_order,
    deal,
    gpujob_manifest,
    queue_tree,
)

GPUJOBS = "/apis/kubegang.io/v1alpha1/namespaces/{ns}/gpujobs"
PODS = "/api/v1/namespaces/{ns}/pods"
PLANNED_NODE = "kubegang.io/node"
K = TypeVar("K", bound=Hashable)
SCHEDULER_VERBS = ("filter", "prioritize", "preempt", "bind")
"""The extender's HTTPS verbs, the part kube-scheduler waits for on every pod (gRPC is the operator's)."""


@dataclass(frozen=True)
class Target:
    """The control plane to run on: its kubeconfig, the folder hack/cluster keeps it in, kubectl."""

    kubeconfig: Path
    cluster_dir: Path
    kubectl: str

    @property
    def api(self) -> kube.Api:
        return kube.Api.from_kubeconfig(self.kubeconfig)


@dataclass(frozen=True)
class HalfSettings:
    appliers: int = 4
    """Parallel ``kubectl apply`` processes, each with one multi-document file."""
    timeout_s: float = 600.0
    """Give up waiting for everything to run after this long (the result says it is incomplete)."""
    stall_s: float = 90.0
    """Give up earlier when nothing was bound or started for this long after the last apply ended."""
    profile_dir: Path | None = None
    """Where py-spy's collapsed stacks of kubegang's processes go (None: no profile)."""
    quota: float = 1.0
    """The leaf queues' nominal GPUs together, as a multiple of the cluster's (the same in every half):
    above 1, quota no longer fills with the GPUs, so jobs wait for a place, not for quota (overcommitted
    quotas, as many clusters run them)."""


# -- capacity and audit ---------------------------------------------------------------------------

def gpu_nodes(target: Target) -> dict[str, int]:
    """Allocatable GPUs of every node that has any."""
    nodes, _ = kube.list_items(target.api, "/api/v1/nodes")
    out = {}
    for n in nodes:
        gpus = int(n.get("status", {}).get("allocatable", {}).get(GPU, "0") or 0)
        if gpus:
            out[n["metadata"]["name"]] = gpus
    return out


def gpu_product(target: Target) -> str:
    nodes, _ = kube.list_items(target.api, "/api/v1/nodes", {"labelSelector": "nvidia.com/gpu.present=true"})
    products = sorted({n["metadata"]["labels"].get("nvidia.com/gpu.product", "") for n in nodes} - {""})
    return products[0] if len(products) == 1 else "default"


def pod_gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources", {})
        total += int(res.get("requests", {}).get(GPU) or res.get("limits", {}).get(GPU) or 0)
    return total


def audit(target: Target, namespace: str | None = None) -> dict[str, Any]:
    """GPU requests of every pod that holds its node (bound, not finished), summed per node, against
    allocatable; and, for kubegang's pods, whether each landed on the node it was planned on."""
    capacity = gpu_nodes(target)
    pods, _ = kube.list_items(target.api, "/api/v1/pods")
    used: dict[str, int] = {}
    off_plan: list[str] = []
    for p in pods:
        node = p.get("spec", {}).get("nodeName")
        if not node or p.get("status", {}).get("phase") in FINISHED:
            continue
        used[node] = used.get(node, 0) + pod_gpus(p)
        planned = (p["metadata"].get("annotations") or {}).get(PLANNED_NODE)
        if planned and planned != node and (namespace is None or p["metadata"]["namespace"] == namespace):
            off_plan.append(f"{p['metadata']['namespace']}/{p['metadata']['name']} on {node}, planned {planned}")
    over = {n: f"{u} > {capacity.get(n, 0)}" for n, u in sorted(used.items()) if u > capacity.get(n, 0)}
    return {"nodes_with_gpus": len(used), "gpus_in_use": sum(used.values()), "overcommitted_nodes": over,
            "pods_off_plan": off_plan[:20], "pods_off_plan_count": len(off_plan)}


# -- the extender's own account of its time ------------------------------------------------------

def _summed(text: str, family_name: str, key: Callable[[Sample], K | None]) -> dict[K, float]:
    """The samples of one metric family in Prometheus text, summed by ``key`` (None leaves one out)."""
    out: dict[K, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            k = key(sample)
            if k is not None:
                out[k] = out.get(k, 0.0) + sample.value
    return out


def _kubegang_ports(cluster_dir: Path) -> dict[str, Any]:
    """The ports ``hack/cluster kubegang up`` recorded (OSError, KeyError or ValueError when it did not)."""
    ports: dict[str, Any] = json.loads((cluster_dir / "kubegang.json").read_text())["ports"]
    return ports


def extender_verbs(cluster_dir: Path) -> dict[str, tuple[float, float]]:
    """Per verb, (seconds, requests) so far from the extender's request-duration histogram; {} when
    the stack or its metrics port is not there."""
    try:
        port = _kubegang_ports(cluster_dir)["extender_metrics"]
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except (OSError, KeyError, ValueError, httpx.HTTPError):
        return {}

    def part(sample: Sample) -> tuple[str, str] | None:
        kind = sample.name.rsplit("_", 1)[-1]
        return (sample.labels.get("verb", ""), kind) if kind in ("sum", "count") else None

    totals = _summed(text, "kubegang_extender_request_duration_seconds", part)
    verbs = {verb for verb, _ in totals}
    return {v: (totals.get((v, "sum"), 0.0), totals.get((v, "count"), 0.0)) for v in verbs}


def operator_status_writes(cluster_dir: Path) -> dict[str, float]:
    """GPUJob status writes so far, summed over the operator replicas, by ``change phase``
    (``kubegang_operator_gpujob_status_writes_total``); {} when no replica's metrics can be read."""
    try:
        ports = _kubegang_ports(cluster_dir)["operator_metrics"]
    except (OSError, KeyError, ValueError):
        return {}
    out: dict[str, float] = {}

    def key(sample: Sample) -> str | None:
        if not sample.name.endswith("_total"):
            return None
        return f"{sample.labels.get('change', '')} {sample.labels.get('phase', '')}".strip()

    for port in ports:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        except httpx.HTTPError:
            continue
        for k, v in _summed(text, "kubegang_operator_gpujob_status_writes", key).items():
            out[k] = out.get(k, 0.0) + v
    return out


def extender_window(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]],
                    pods: int) -> dict[str, Any]:
    """Server-side seconds and requests per verb during the burst, and the HTTP verbs' time per pod."""
    verbs = {v: {"seconds": round(s - before.get(v, (0.0, 0.0))[0], 3),
                 "requests": int(c - before.get(v, (0.0, 0.0))[1])} for v, (s, c) in sorted(after.items())}
    http = sum(d["seconds"] for v, d in verbs.items() if v in SCHEDULER_VERBS)
    return {"verbs": verbs, "scheduler_verbs_seconds": round(http, 3),
            "scheduler_verbs_ms_per_pod": round(1000 * http / pods, 3) if pods else None}


# -- the API server's account of the requests it served ---------------------------------------

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})


def apiserver_requests(target: Target) -> dict[str, float]:
    """Requests served so far, by ``VERB resource[/subresource]`` (apiserver_request_total summed over
    codes and scopes); {} when the metrics cannot be read."""
    try:
        with target.api.client() as c:
            text = c.get("/metrics").text
    except httpx.HTTPError:
        return {}

    def request(sample: Sample) -> str | None:
        if not sample.name.endswith("_total"):
            return None
        labels = sample.labels
        sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
        return f"{labels.get('verb', '')} {labels.get('resource', '')}{sub}"

    def seconds(sample: Sample) -> str | None:
        # Long-running requests (WATCH, CONNECT) sit in the histogram for their whole life: left out.
        labels = sample.labels
        if not sample.name.endswith("_sum") or labels.get("verb") in ("WATCH", "CONNECT"):
            return None
        sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
        return f"seconds {labels.get('verb', '')} {labels.get('resource', '')}{sub}"

    return {**_summed(text, "apiserver_request", request),
            **_summed(text, "apiserver_request_duration_seconds", seconds)}


def apiserver_window(before: dict[str, float], after: dict[str, float], jobs: int, pods: int) -> dict[str, Any]:
    """Writes served during the burst, by verb and resource, and per job and per pod: what the API
    server was asked to do for the burst (every client's, the control plane's own included); and the
    seconds its requests took by verb and resource (apiserver_request_duration_seconds: wall time in
    the server, a request waiting for etcd or a CPU included), the closest it says to where its CPU went."""
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    counts = {k: int(n) for k, n in delta.items() if not k.startswith("seconds ")}
    writes = {k: n for k, n in sorted(counts.items(), key=lambda kv: -kv[1]) if n > 0 and k.split()[0] in WRITE_VERBS}
    busy = {k.removeprefix("seconds "): round(s, 2) for k, s in sorted(delta.items(), key=lambda kv: -kv[1])
            if k.startswith("seconds ") and s > 0.005}
    reads = {k: n for k, n in sorted(counts.items(), key=lambda kv: -kv[1])
             if n > 0 and k.split()[0] in ("GET", "LIST")}
    total = sum(writes.values())
    return {"writes": writes, "writes_total": total, "reads": reads,
            "writes_per_job": round(total / jobs, 2) if jobs else None,
            "writes_per_pod": round(total / pods, 2) if pods else None,
            "request_seconds": busy, "request_seconds_total": round(sum(busy.values()), 2)}


# -- one half -------------------------------------------------------------------------------------

def _own_cpu() -> tuple[float, float]:
    """CPU seconds of this harness (watch threads) and of the kubectl processes it has waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _client_cpu(start: tuple[float, float]) -> dict[str, float]:
    end = _own_cpu()
    return {"harness_cpu_seconds": round(end[0] - start[0], 2), "kubectl_cpu_seconds": round(end[1] - start[1], 2)}


def _ensure_namespace(target: Target, name: str) -> None:
    kube.kubectl(target.kubectl, target.kubeconfig, "create", "namespace", name)
    kube.wait_until(f"service account default in {name}", lambda: _exists(target, f"/api/v1/namespaces/{name}"
                                                                              "/serviceaccounts/default"), 60)


def _exists(target: Target, path: str) -> bool:
    with target.api.client() as c:
        return c.get(path).status_code == 200


def _left(target: Target, path: str) -> int:
    items, _ = kube.list_items(target.api, path)
    return len(items)


def _delete_all(target: Target, path: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the caller checks the result and asks again
        kube.delete_collection(target.api, path)


def cleanup(target: Target, namespace: str, gpujobs: bool, timeout: float = 300) -> float:
    """Delete jobs (first, so nothing recreates pods), pods and the namespace; wait until it is gone."""
    t0 = time.monotonic()

    def gone(path: str) -> Callable[[], bool]:
        # A big collection outlasts the API server's request timeout, which then drops the call
        # half done: ask again until nothing is left. Every GPUJob goes before any pod: a job whose
        # pods are deleted under it is requeued and admitted again, and its pods come back.
        def check() -> bool:
            _delete_all(target, path)
            return _left(target, path) == 0
        return check

    if gpujobs:
        kube.wait_until(f"GPUJobs of {namespace} deleted", gone(GPUJOBS.format(ns=namespace)), timeout, 1.0)
    kube.wait_until(f"pods of {namespace} deleted", gone(PODS.format(ns=namespace)), timeout, 1.0)
    kube.kubectl(target.kubectl, target.kubeconfig, "delete", "namespace", namespace, "--wait=false")
    # Until the namespace controller has deleted what is left (a half's 5,000 Scheduled Events): left
    # running, it deleted them during the next half's burst and charged that half with it (DELETE
    # events, 22 s of API-server request time inside a kubegang window).
    left = max(1.0, timeout - (time.monotonic() - t0))
    kube.wait_until(f"namespace {namespace} gone", lambda: not _exists(target, f"/api/v1/namespaces/{namespace}"),
                    left, 1.0)
    return round(time.monotonic() - t0, 1)


def _await(done: Callable[[], bool], progress: Callable[[], int], settings: HalfSettings) -> bool:
    """Wait until ``done``; False at the timeout, or once ``progress`` (a count) stood still for ``stall_s``."""
    deadline = time.monotonic() + settings.timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if done():
            return True
        now, seen = time.monotonic(), progress()
        if seen != last:
            last, since = seen, now
        elif now - since > settings.stall_s:
            return False
        time.sleep(0.25)
    return False


def run_plain(target: Target, jobs: Sequence[BenchJob], namespace: str, settings: HalfSettings) -> dict[str, Any]:
    """Baseline: every pod of every job as a plain pod for the default scheduler, largest first."""
    docs = baseline_order(jobs, namespace)
    _ensure_namespace(target, namespace)
    before, own = procstats.sample_cluster(target.cluster_dir), _own_cpu()
    requests_before = apiserver_requests(target)
    rec = Recorder(time.monotonic())
    watch = kube.Watch(target.api, PODS.format(ns=namespace), rec.on_pod)
    watch.start()
    rec.t0 = time.monotonic()
    apply_s = kube.apply_parallel(target.kubectl, target.kubeconfig, deal(docs, settings.appliers))
    finished = _await(lambda: rec.running_pods() >= len(docs), rec.running_pods, settings)
    wall = time.monotonic() - rec.t0
    after = procstats.sample_cluster(target.cluster_dir)
    requests = apiserver_window(requests_before, apiserver_requests(target), len(jobs), len(docs))
    watch.stop()
    pods = rec.pod_list()
    result = {
        "namespace": namespace, "complete": finished, "wall_s": round(wall, 2),
        "apply_s": [round(s, 2) for s in apply_s],
        "pods_created": rate([p.created for p in pods], len(docs)),
        "pods_bound": rate([p.bound for p in pods if p.bound is not None], len(docs)),
        "pods_running": rate([p.running for p in pods if p.running is not None], len(docs)),
        "time_until_all_running_s": max((p.running or 0.0 for p in pods), default=None) if finished else None,
        "pending_pods": sum(1 for p in pods if p.bound is None),
        "processes": procstats.window(before, after), "clients": _client_cpu(own), "apiserver": requests,
        "audit": audit(target),
        "watch_errors": watch.errors[:10],
    }
    return result


def apply_queues(target: Target, leaves: Sequence[str], capacity: int, flavor: str, namespace: str) -> bool:
    docs = queue_tree(leaves, capacity, flavor, namespace)
    kube.kubectl(target.kubectl, target.kubeconfig, "apply", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": docs}))

    def seen() -> bool:
        items, _ = kube.list_items(target.api, "/apis/kubegang.io/v1alpha1/gpuqueues")
        observed = {q["metadata"]["name"] for q in items if "usage" in (q.get("status") or {})}
        return {d["metadata"]["name"] for d in docs} <= observed

    # The operator writes queue status once it has the tree; jobs sent before that would only wait.
    try:
        kube.wait_until("the operator to observe the GPUQueues", seen, 60)
        return True
    except TimeoutError:
        return False


def idle(target: Target, seconds: float) -> dict[str, Any]:
    """CPU of every process over ``seconds`` with nothing submitted: what the stack costs at rest
    (the agent's polling, leases, the extender's and operators' watches, kwok's heartbeats)."""
    before = procstats.sample_cluster(target.cluster_dir)
    time.sleep(seconds)
    return {"seconds": seconds, "processes": procstats.window(before, procstats.sample_cluster(target.cluster_dir))}


GC_DISCOVERY_SECONDS = 30.0
"""kube-controller-manager's garbage collector looks for new resources in discovery this often
(``garbagecollector.Sync``'s period, fixed in kube-controller-manager)."""


def settle_garbage_collector(target: Target, crd: str = "gpujobs.kubegang.io", margin: float = 5.0) -> float:
    """Wait until the garbage collector watches the GPUJobs, as it does in a cluster where kubegang
    was installed before the jobs came; the seconds waited.

    Until its discovery pass has found a new custom resource, the collector knows a pod's GPUJob
    owner only as a "virtual" node and GETs it from the API server to check it exists: one live
    read per job, which users never pay (the CRDs are installed with the chart long before a
    burst). A quick run that started its burst 10 s after ``kubegang up`` served 387 such GETs of
    GPUJobs (21 s of request time); one that waited served none."""
    with target.api.client() as c:
        resp = c.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    resp.raise_for_status()
    created = resp.json()["metadata"]["creationTimestamp"]
    age = time.time() - datetime.datetime.fromisoformat(created).timestamp()
    wait = max(0.0, GC_DISCOVERY_SECONDS + margin - age)
    time.sleep(wait)
    return round(wait, 1)


def leader_identity(target: Target) -> str | None:
    """Who holds the operator's Lease (``local-operator-<i>`` runs as process kubegang-operator-<i>)."""
    with target.api.client() as c:
        resp = c.get("/apis/coordination.k8s.io/v1/namespaces/kubegang-system/leases/kubegang-operator")
    return resp.json().get("spec", {}).get("holderIdentity") if resp.status_code == 200 else None


def delete_queues(target: Target, leaves: Sequence[str]) -> None:
    kube.kubectl(target.kubectl, target.kubeconfig, "delete", "gpuqueue", *leaves, "bench-root",
                 "--ignore-not-found", "--wait=false")


def run_kubegang(target: Target, jobs: Sequence[BenchJob], namespace: str, settings: HalfSettings,
                 leaves: Sequence[str]) -> dict[str, Any]:
    """The burst as GPUJobs: queues first, then every job at once; the operator creates the pods."""
    capacity = sum(gpu_nodes(target).values())
    _ensure_namespace(target, namespace)
    t_queues = time.monotonic()
    queues_observed = apply_queues(target, leaves, round(capacity * settings.quota), gpu_product(target), namespace)
    queues_s = round(time.monotonic() - t_queues, 1)
    docs = [gpujob_manifest(j, namespace) for j in jobs]
    n_pods = sum(j.pods for j in jobs)
    before, own = procstats.sample_cluster(target.cluster_dir), _own_cpu()
    verbs_before = extender_verbs(target.cluster_dir)
    status_before = operator_status_writes(target.cluster_dir)
    requests_before = apiserver_requests(target)
    rec = Recorder(time.monotonic())
    job_watch = kube.Watch(target.api, GPUJOBS.format(ns=namespace), rec.on_job)
    pod_watch = kube.Watch(target.api, PODS.format(ns=namespace), rec.on_pod)
    job_watch.start()
    pod_watch.start()
    profiler = Profiler(target.cluster_dir, settings.profile_dir) if settings.profile_dir else None
    if profiler:
        profiler.start()
    rec.t0 = time.monotonic()
    apply_s = kube.apply_parallel(target.kubectl, target.kubeconfig, deal(docs, settings.appliers))
    finished = _await(lambda: rec.started_jobs() >= len(docs) and rec.running_pods() >= n_pods,
                      lambda: rec.started_jobs() + rec.running_pods(), settings)
    wall = time.monotonic() - rec.t0
    after = procstats.sample_cluster(target.cluster_dir)
    profiles = profiler.stop() if profiler else {}
    verbs_after = extender_verbs(target.cluster_dir)
    status_after = operator_status_writes(target.cluster_dir)
    requests = apiserver_window(requests_before, apiserver_requests(target), len(docs), n_pods)
    job_watch.stop()
    pod_watch.stop()
    pods = rec.pod_list()
    live = [p for p in pods if p.deleted is None]
    job_list = rec.job_list()
    phases: dict[str, int] = {}
    for j in job_list:
        phases[j.phase or "(none)"] = phases.get(j.phase or "(none)", 0) + 1
    not_started = [f"{j.name}: {j.phase} {j.reason}" for j in job_list if j.phase not in ("Running", "Succeeded")]
    admitted = sorted(t for j in job_list if (t := j.phases.get("Admitted", j.phases.get("Running"))) is not None)
    return {
        "namespace": namespace, "complete": finished, "wall_s": round(wall, 2),
        "apply_s": [round(s, 2) for s in apply_s], "queues_observed_by_operator": queues_observed,
        "queues_ready_s": queues_s,
        "jobs_created": rate([j.created for j in job_list], len(docs)),
        "jobs_admitted": rate(admitted, len(docs)),
        "jobs_started": rate(rec.job_start_times(), len(docs)),
        "pods_created": rate([p.created for p in pods], n_pods),
        "pods_bound": rate([p.bound for p in live if p.bound is not None], n_pods),
        "pods_running": rate([p.running for p in live if p.running is not None], n_pods),
        "time_until_all_running_s": max((p.running or 0.0 for p in live), default=None) if finished else None,
        "pods_deleted_during_run": sum(1 for p in pods if p.deleted is not None),
        "job_phases": phases,
        "jobs_not_started": not_started[:20],
        "processes": procstats.window(before, after), "clients": _client_cpu(own),
        "extender": extender_window(verbs_before, verbs_after, n_pods), "apiserver": requests,
        "gpujob_status_writes": {k: int(v - status_before.get(k, 0.0)) for k, v in sorted(status_after.items())
                                 if v - status_before.get(k, 0.0) > 0},
        "audit": audit(target, namespace),
        "watch_errors": (job_watch.errors + pod_watch.errors)[:10],
        "leader": leader_identity(target),
        **({"profiles": profiles, "profile_errors": profiler.errors} if profiler else {}),
    }
