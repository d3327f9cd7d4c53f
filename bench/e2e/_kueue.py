"""The third half: the same burst as Kueue workloads, through the real Kueue v0.17 and kube-scheduler's
default profile (no extender), as a Kueue user would set it up.

- **Jobs, not pod groups.** Every job is a ``batch/v1`` Job with ``parallelism = completions =`` its
  pod count, labelled ``kueue.x-k8s.io/queue-name``. Kueue turns a Job into one Workload and admits it
  whole or not at all (its webhook creates it suspended; admission unsuspends it), which is the
  all-or-nothing a gang needs; batch Jobs are also what most Kueue users submit and what Kueue's own
  documentation starts from. Plain pod groups (``kueue.x-k8s.io/pod-group-name``) would admit the same
  way but put a Kueue finalizer and webhook call on every pod, a path few users take for batch work.
  The Job controller (kube-controller-manager) creates the pods after admission, as kubegang's
  operator creates a GPUJob's pods after admission.
- **The same quota tree.** One ClusterQueue per leaf GPUQueue with the leaf's nominal GPUs (the one
  ``leaf_share`` rule), all in the cohort ``bench-root`` (an explicit Cohort with no quota of its own,
  the GPUQueue root's ``nominal: 0``), so leaves borrow freely as the GPUQueues do; one LocalQueue per
  leaf in the half's namespace.
- **Topology Aware Scheduling from the same node labels.** A ``Topology`` whose levels are the fabric
  labels every GPU node carries (``kubegang.topology.TopologyLabels``: block, spine, leaf, NVLink
  domain where labelled), then ``kubernetes.io/hostname``; one ResourceFlavor on the GPU nodes with
  that topology. Each Job's pod template carries the Kueue annotation that mirrors the GPUJob's
  ``topology`` (``topology_annotations``): a GPUJob without one is placed in the narrowest domain
  that holds it, widening up to the cluster, which is Kueue's ``podset-preferred-topology`` at the
  hostname level.
- Kueue's client rate limit is raised to kubegang's operator's (hack/addons.py says why).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench.e2e import _harness as harness
from bench.e2e import _kube as kube
from bench.e2e import _procstats as procstats
from bench.e2e._kube import Event
from bench.e2e._record import Recorder, rate
from bench.e2e._workload import GPU, BenchJob, container, deal, leaf_share, pod_metadata
from kubegang.api import Topology
from kubegang.levels import Level
from kubegang.topology import TopologyLabels

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
HOSTNAME = "kubernetes.io/hostname"
GPU_NODES = {"nvidia.com/gpu.present": "true"}
TOPOLOGY = "bench-topology"
FLAVOR = "bench-gpu"
COHORT = "bench-root"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"
CLUSTER_QUEUES = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
FABRIC = (Level.BLOCK, Level.SPINE, Level.LEAF, Level.NVLINK)
"""kubegang's fabric levels above the node, widest first (Kueue lists levels widest first)."""


# -- the objects ----------------------------------------------------------------------------------

def topology_levels(nodes: Sequence[Mapping[str, Any]],
                    labels: TopologyLabels | None = None) -> list[tuple[Level, str]]:
    """Kueue's Topology levels, widest first: each fabric level whose label every GPU node carries, then
    the hostname. Kueue leaves a node without one of the levels' labels out of TAS altogether, and
    kubegang reads a missing label as a domain of one node, so a level only some nodes label is dropped."""
    labels = labels or TopologyLabels()
    gpu = [n for n in nodes if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in GPU_NODES.items())]
    if not gpu:
        raise ValueError("no GPU node (label nvidia.com/gpu.present=true): nothing for Kueue's topology")
    out = []
    for level in FABRIC:
        key = labels.key(level)
        if key and all(key in (n["metadata"].get("labels") or {}) for n in gpu):
            out.append((level, key))
    return [*out, (Level.NODE, HOSTNAME)]


def _label_at(level: Level, levels: Sequence[tuple[Level, str]]) -> str | None:
    """The Kueue level label for kubegang ``level``: that level's, or else the nearest narrower one
    (an unlabelled domain is one node's, as kubegang reads it); None for the whole cluster."""
    if level >= Level.CLUSTER:
        return None
    return max(((lv, key) for lv, key in levels if lv <= level), default=(Level.NODE, HOSTNAME))[1]


def topology_annotations(topology: Topology, levels: Sequence[tuple[Level, str]]) -> dict[str, str]:
    """The pod-template annotations that ask Kueue for what a GPUJob's ``topology`` asks kubegang.

    ``required`` becomes ``podset-required-topology`` (a required ``cluster`` asks nothing). Without
    ``required``, kubegang tries ``preferred`` (default: the node) and widens level by level up to the
    cluster, which is ``podset-preferred-topology``. Kueue takes one of the two; with both set the
    requirement wins (the preference below it is lost, which Kueue cannot express).
    """
    if topology.required is not None:
        key = _label_at(Level.parse(topology.required), levels)
        return {REQUIRED_TOPOLOGY: key} if key else {}
    key = _label_at(Level.parse(topology.preferred or "node"), levels)
    return {PREFERRED_TOPOLOGY: key} if key else {}


def kueue_objects(leaves: Sequence[str], capacity_gpus: int, namespace: str,
                  levels: Sequence[tuple[Level, str]]) -> list[dict[str, Any]]:
    """Topology, ResourceFlavor, Cohort, a ClusterQueue per leaf and its LocalQueue in ``namespace``."""
    share = leaf_share(capacity_gpus, leaves)
    docs: list[dict[str, Any]] = [
        {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": TOPOLOGY},
         "spec": {"levels": [{"nodeLabel": key} for _, key in levels]}},
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": dict(GPU_NODES), "topologyName": TOPOLOGY}},
        {"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": {"name": COHORT}, "spec": {}},
    ]
    for leaf in leaves:
        docs.append({"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": leaf}, "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                {"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": share}]}]}]}})
        docs.append({"apiVersion": KUEUE_API, "kind": "LocalQueue",
                     "metadata": {"name": leaf, "namespace": namespace}, "spec": {"clusterQueue": leaf}})
    return docs


def job_manifest(job: BenchJob, namespace: str, annotations: Mapping[str, str]) -> dict[str, Any]:
    """The job as a batch Job for Kueue: all its pods in one PodSet, admitted together."""
    meta = pod_metadata(job)
    meta["annotations"] = {**meta.get("annotations", {}), **annotations}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job.name, "namespace": namespace, "labels": {QUEUE_NAME_LABEL: job.queue}},
        "spec": {"parallelism": job.pods, "completions": job.pods, "backoffLimit": 0, "template": {
            "metadata": meta,
            "spec": {"schedulerName": "default-scheduler", "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 0, "containers": [container(job.gpus_per_pod)]}}},
    }


# -- what the watches see ---------------------------------------------------------------------------

def _condition_true(obj: Mapping[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class KueueRecorder:
    """When each Job was first seen, admitted (its Workload's ``Admitted`` condition) and started
    (every pod ready or done, by the Job's own status)."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.created: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.unsuspended: dict[str, float] = {}
        """When Kueue cleared the Job's ``suspend`` (after admission; the Job controller then makes pods)."""
        self.started: dict[str, float] = {}
        self.waiting: dict[str, str] = {}
        """Workloads not admitted: the message of their last condition that is True."""
        self.topology_assigned: set[str] = set()
        """Jobs whose admission carries a TAS topology assignment (Kueue chose their nodes)."""

    def on_workload(self, event: Event) -> None:
        at, _, obj = event
        owners = obj["metadata"].get("ownerReferences") or []
        job = next((o["name"] for o in owners if o.get("kind") == "Job"), None)
        if job is None:
            return
        if _condition_true(obj, "Admitted"):
            self.admitted.setdefault(job, at - self.t0)
            self.waiting.pop(job, None)
            assignments = ((obj.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
            if assignments and all(a.get("topologyAssignment") for a in assignments):
                self.topology_assigned.add(job)
        else:
            true = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
            self.waiting[job] = "; ".join(f"{c.get('type')}/{c.get('reason')}: {c.get('message', '')}" for c in true)

    def on_job(self, event: Event) -> None:
        at, _, obj = event
        name = obj["metadata"]["name"]
        self.created.setdefault(name, at - self.t0)
        if (obj.get("spec") or {}).get("suspend") is False:
            self.unsuspended.setdefault(name, at - self.t0)
        status, want = obj.get("status") or {}, int((obj.get("spec") or {}).get("parallelism") or 0)
        if want and int(status.get("ready") or 0) + int(status.get("succeeded") or 0) >= want:
            self.started.setdefault(name, at - self.t0)


# -- the half -----------------------------------------------------------------------------------------

def apply_queues(target: harness.Target, docs: Sequence[Mapping[str, Any]], leaves: Sequence[str]) -> bool:
    """Apply the queue objects; True once every ClusterQueue is Active (its flavor and topology known)."""
    kube.kubectl(target.kubectl, target.kubeconfig, "apply", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(docs)}))

    def active() -> bool:
        items, _ = kube.list_items(target.api, CLUSTER_QUEUES)
        return set(leaves) <= {q["metadata"]["name"] for q in items if _condition_true(q, "Active")}

    try:
        kube.wait_until("Kueue's ClusterQueues to become Active", active, 120)
        return True
    except TimeoutError:
        return False


def run_kueue(target: harness.Target, jobs: Sequence[BenchJob], namespace: str, settings: harness.HalfSettings,
              leaves: Sequence[str]) -> dict[str, Any]:
    """The burst as Kueue Jobs: queues first, then every Job at once; Kueue admits, the Job controller
    creates the pods, Kueue's TAS picks their nodes and kube-scheduler binds them."""
    nodes, _ = kube.list_items(target.api, "/api/v1/nodes")
    capacity = sum(harness.gpu_nodes(target).values())
    levels = topology_levels(nodes)
    harness._ensure_namespace(target, namespace)
    t_queues = time.monotonic()
    queues_active = apply_queues(target, kueue_objects(leaves, round(capacity * settings.quota), namespace, levels),
                                 leaves)
    queues_s = round(time.monotonic() - t_queues, 1)
    annotations = topology_annotations(Topology(), levels)
    docs = [job_manifest(j, namespace, annotations) for j in jobs]
    n_pods = sum(j.pods for j in jobs)
    before, own = procstats.sample_cluster(target.cluster_dir), harness._own_cpu()
    requests_before = harness.apiserver_requests(target)
    rec, kq = Recorder(time.monotonic()), KueueRecorder(time.monotonic())
    watches = [kube.Watch(target.api, JOBS.format(ns=namespace), kq.on_job),
               kube.Watch(target.api, WORKLOADS.format(ns=namespace), kq.on_workload),
               kube.Watch(target.api, harness.PODS.format(ns=namespace), rec.on_pod)]
    for w in watches:
        w.start()
    rec.t0 = kq.t0 = time.monotonic()
    apply_s = kube.apply_parallel(target.kubectl, target.kubeconfig, deal(docs, settings.appliers))
    finished = harness._await(lambda: rec.running_pods() >= n_pods,
                              lambda: len(kq.admitted) + rec.running_pods(), settings)
    wall = time.monotonic() - rec.t0
    after = procstats.sample_cluster(target.cluster_dir)
    requests = harness.apiserver_window(requests_before, harness.apiserver_requests(target), len(docs), n_pods)
    for w in watches:
        w.stop(timeout=0)  # nothing they read after this counts; idle streams end by themselves
    pods = rec.pod_list()
    live = [p for p in pods if p.deleted is None]
    not_admitted = sorted(set(kq.created) - set(kq.admitted))
    return {
        "namespace": namespace, "complete": finished, "wall_s": round(wall, 2),
        "apply_s": [round(s, 2) for s in apply_s], "queues_active": queues_active, "queues_ready_s": queues_s,
        "topology_levels": [key for _, key in levels], "topology_annotations": annotations,
        "jobs_created": rate(list(kq.created.values()), len(docs)),
        "jobs_admitted": rate(list(kq.admitted.values()), len(docs)),
        "jobs_unsuspended": rate(list(kq.unsuspended.values()), len(docs)),
        "jobs_started": rate(list(kq.started.values()), len(docs)),
        "pods_created": rate([p.created for p in pods], n_pods),
        "pods_bound": rate([p.bound for p in live if p.bound is not None], n_pods),
        "pods_running": rate([p.running for p in live if p.running is not None], n_pods),
        "time_until_all_running_s": max((p.running or 0.0 for p in live), default=None) if finished else None,
        "pods_deleted_during_run": sum(1 for p in pods if p.deleted is not None),
        "jobs_not_admitted": [f"{j}: {kq.waiting.get(j, '')}" for j in not_admitted[:20]],
        "jobs_not_admitted_count": len(not_admitted),
        "jobs_with_topology_assignment": len(kq.topology_assigned),
        "processes": procstats.window(before, after), "clients": harness._client_cpu(own), "apiserver": requests,
        "audit": harness.audit(target, namespace),
        "watch_errors": [e for w in watches for e in w.errors][:10],
    }


def cleanup(target: harness.Target, namespace: str, leaves: Sequence[str], timeout: float = 300) -> float:
    """Jobs first (so the Job controller makes no new pods), then pods and the namespace; then the queues."""
    t0 = time.monotonic()
    harness._delete_all(target, JOBS.format(ns=namespace))
    harness.cleanup(target, namespace, gpujobs=False, timeout=timeout)
    kube.kubectl(target.kubectl, target.kubeconfig, "delete", "clusterqueue", *leaves, "--ignore-not-found",
                 "--wait=false")
    kube.kubectl(target.kubectl, target.kubeconfig, "delete", "cohort", COHORT, "--ignore-not-found", "--wait=false")
    return round(time.monotonic() - t0, 1)
