"""Examples are tests: every file in examples/ runs as shipped on the cluster ``make demo`` starts.

The demo's cluster is hack/shapes/superpod-h100.yaml plus hack/shapes/demo-h200.yaml, with the
PriorityClasses of examples/demo/priorityclasses.yaml (what hack/demo.sh sets up). Each example
file is applied with kubectl, as a user applies it, together with the demo's quota tree
(examples/demo/queues.yaml); every GPUJob in it must reach Running with the GPUs it asked for on
every pod, and every leaf GPUQueue in it must run a job. Each case deletes what it applied, so the
cases are independent; the module removes the H200 nodes and the PriorityClasses at the end, so
the rest of the suite finds the superpod shape it expects.

The first tests need no cluster: they check that the examples ask only for what the demo has (GPU
products, PriorityClasses, leaf queues) and that the demo's quota adds up to its GPUs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegang import podcontract
from kubegang.api import GPUJob, GPUQueue, parse_manifest
from kubegang.shapes import load_shape

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
QUEUES = EXAMPLES / "demo" / "queues.yaml"
PRIORITY_CLASSES = EXAMPLES / "demo" / "priorityclasses.yaml"
SETUP = (QUEUES, PRIORITY_CLASSES)
"""What hack/demo.sh applies before any job; every case has them."""
CASES = [p for p in sorted(EXAMPLES.glob("*.yaml")) + sorted((EXAMPLES / "demo").glob("*.yaml")) if p not in SETUP]
MAIN_SHAPE = "superpod-h100"
EXTRA_SHAPE = REPO / "hack" / "shapes" / "demo-h200.yaml"
"""hack/demo.sh adds it to the main shape."""
DEMO_SHAPES = (REPO / "hack" / "shapes" / f"{MAIN_SHAPE}.yaml", EXTRA_SHAPE)
GPU = podcontract.GPU_RESOURCE
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MILLI_ANNOTATION = podcontract.GPU_MILLI_ANNOTATION
LEVEL_LABELS = {"leaf": "kubegang.io/leaf", "spine": "kubegang.io/spine", "block": "kubegang.io/block",
                "nvlink": "kubegang.io/nvlink-domain"}
RUNNING_TIMEOUT = 120.0
CAMEL_CASE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
NOT_WHILE_RUNNING = ("Queued", "Unschedulable", "Suspended", "Succeeded", "Failed", "Preempted")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _kind(path: Path, kind: str) -> list[dict[str, Any]]:
    return [d for d in _docs(path) if d.get("kind") == kind]


def _demo_gpus() -> Counter[str]:
    """GPUs per product (= quota flavour) on the demo's cluster."""
    gpus: Counter[str] = Counter()
    for shape_file in DEMO_SHAPES:
        for _, group in load_shape(shape_file).nodes():
            if group.gpus and group.product:
                gpus[group.product] += group.gpus
    return gpus


def _case_id(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


# -- without a cluster: the examples ask only for what the demo has -------------------------------

def test_every_example_file_is_a_case_or_the_demo_set_up() -> None:
    files = set(EXAMPLES.rglob("*.yaml"))
    assert files == set(CASES) | set(SETUP), f"not run by this module: {sorted(map(str, files - set(CASES)))}"
    assert CASES


def test_demo_quota_adds_up_to_the_demo_gpus() -> None:
    """Every GPU a tree promises is some queue's nominal (a parent's nominal is a pool of its own, on
    top of its children's: docs/quota.md), so per flavour the nominals of every queue the demo
    applies add up to at most the GPUs of that product; and each flavour is a product the nodes carry."""
    gpus = _demo_gpus()
    nominal: Counter[str] = Counter()
    for path in [QUEUES, *CASES]:
        for doc in _kind(path, "GPUQueue"):
            for quota in GPUQueue.model_validate(doc).spec.resources:
                assert quota.flavor in gpus, f"{_case_id(path)}: flavour {quota.flavor!r} is no GPU product of the " \
                                             f"demo's nodes ({', '.join(gpus)})"
                nominal[quota.flavor] += quota.nominal
    for flavor, total in nominal.items():
        assert total <= gpus[flavor], f"the demo's queues promise {total} {flavor}, the demo has {gpus[flavor]}"


def test_examples_name_only_what_the_demo_has() -> None:
    classes = {d["metadata"]["name"] for d in _kind(PRIORITY_CLASSES, "PriorityClass")}
    leaves_by_file = {}
    for path in [QUEUES, *CASES]:
        queues = [GPUQueue.model_validate(d) for d in _kind(path, "GPUQueue")]
        parents = {q.spec.parent for q in queues}
        leaves_by_file[path] = {q.metadata.name for q in queues if q.metadata.name not in parents}
    for path in CASES:
        for doc in _kind(path, "GPUJob"):
            job = parse_manifest(doc)
            assert isinstance(job, GPUJob)
            spec, where = job.spec, f"{_case_id(path)} GPUJob {job.metadata.name}"
            if spec.priority_class_name:
                assert spec.priority_class_name in classes, f"{where}: no PriorityClass {spec.priority_class_name}"
            if spec.gpu_product:
                assert spec.gpu_product in _demo_gpus(), f"{where}: the demo has no {spec.gpu_product}"
            assert spec.queue in leaves_by_file[QUEUES] | leaves_by_file[path], f"{where}: no leaf queue {spec.queue}"


# -- on the demo's cluster ------------------------------------------------------------------------

def _hack(cluster: Any, *args: str) -> None:
    proc = subprocess.run([str(REPO / "hack" / "cluster"), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KUBEGANG_CLUSTER_DIR": str(cluster.cluster_dir)})
    assert proc.returncode == 0, f"hack/cluster {' '.join(args)} failed: {proc.stderr[-3000:]}"


def _extender_gpus(kubegang: Any, product: str) -> float:
    """All GPUs of ``product`` in the extender's ledger (its ``kubegang_extender_gpus`` metric)."""
    url = f"http://127.0.0.1:{kubegang.ports['extender_metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kubegang_extender_gpus{") and f'product="{product}"' in line)


@pytest.fixture(scope="module")
def demo(cluster: Any, kubegang: Any) -> Iterator[Any]:
    """The session cluster made the demo's: superpod-h100, the H200 nodes, team namespaces, classes."""
    cluster.use_shape(MAIN_SHAPE)
    extra = [name for name, _ in load_shape(EXTRA_SHAPE).nodes()]
    _hack(cluster, "nodes", str(EXTRA_SHAPE))
    gpus = _demo_gpus()
    cluster.wait_for("the demo's GPUs in the extender's ledger", lambda: all(
        _extender_gpus(kubegang, product) == count for product, count in gpus.items()), timeout=90, interval=1)
    created = []
    jobs = [d for p in CASES for d in [*_kind(p, "GPUJob"), *_probe_jobs(p)]]
    for ns in sorted({d["metadata"]["namespace"] for d in jobs}):
        if cluster.kubectl("get", "namespace", ns, check=False).returncode != 0:
            cluster.kubectl("create", "namespace", ns)
            created.append(ns)
    cluster.kubectl("apply", "-f", str(PRIORITY_CLASSES))
    try:
        yield cluster
    finally:
        cluster.kubectl("delete", "-f", str(PRIORITY_CLASSES), "--ignore-not-found", check=False)
        # Back to the main shape alone: later tests count its nodes.
        cluster.kubectl("delete", "nodes", *extra, "--ignore-not-found", "--wait=true", check=False, timeout=300)
        for ns in created:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _gpu_limit(pod: dict[str, Any]) -> int | None:
    """Sum of the containers' nvidia.com/gpu limits; None when no container has one."""
    limits = [(c.get("resources") or {}).get("limits", {}).get(GPU) for c in pod["spec"]["containers"]]
    given = [int(v) for v in limits if v is not None]
    return sum(given) if given else None


def _asked(job: dict[str, Any]) -> tuple[int, int | None]:
    """(whole GPUs per replica, thousandths of one shared GPU or None) as the manifest asks."""
    spec = GPUJob.model_validate(job).spec
    return spec.whole_gpus_per_replica(), spec.gpu_fraction


def _pods(cluster: Any, ns: str, job: str) -> list[dict[str, Any]]:
    items = cluster.get_json("pods", "-n", ns, "-l", f"{podcontract.JOB_NAME_LABEL}={job}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _wait_running(cluster: Any, jobs: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Wait (one deadline for all) until every job is Running: ({ns/name: status}, {ns/name: why not})."""
    keys = {f"{j['metadata']['namespace']}/{j['metadata']['name']}": j for j in jobs}
    seen: dict[str, dict[str, Any]] = {}

    def all_running() -> bool:
        for key, job in keys.items():
            if (seen.get(key) or {}).get("phase") != "Running":
                seen[key] = cluster.get_json("gpujob", job["metadata"]["name"], "-n",
                                             job["metadata"]["namespace"]).get("status") or {}
        return all(s.get("phase") == "Running" for s in seen.values())

    with contextlib.suppress(AssertionError):  # the jobs that are late are reported below
        cluster.wait_for("every GPUJob Running", all_running, timeout=RUNNING_TIMEOUT, interval=1)
    running = {k: s for k, s in seen.items() if s.get("phase") == "Running"}
    late = {k: f"not Running after {RUNNING_TIMEOUT:.0f}s; last status: {json.dumps(s)[:2000]}"
            for k, s in seen.items() if k not in running}
    return running, late


def _problems(cluster: Any, job: dict[str, Any], status: dict[str, Any]) -> list[str]:
    """Everything about a Running job's pods that is not what the manifest asked for."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    spec = job["spec"]
    replicas = int(spec.get("replicas", 1))
    whole, fraction = _asked(job)
    pods = _pods(cluster, ns, name)
    nodes = {n["metadata"]["name"]: n for n in cluster.get_json("nodes")["items"]}
    out: list[str] = []
    if len(pods) != replicas:
        out.append(f"{len(pods)} pods, replicas: {replicas}")
    expected_total = replicas * (fraction / 1000 if fraction else whole)
    if status.get("totalGPUs") != expected_total:
        out.append(f"status.totalGPUs {status.get('totalGPUs')!r}, asked for {expected_total}")
    placed = {p["index"]: p for p in (status.get("placement") or {}).get("pods") or []}
    for pod in pods:
        meta, pod_name = pod["metadata"], pod["metadata"]["name"]
        notes = meta.get("annotations") or {}
        node = pod["spec"].get("nodeName")
        if pod.get("status", {}).get("phase") != "Running":
            out.append(f"{pod_name}: phase {pod.get('status', {}).get('phase')}")
        if not node or notes.get(podcontract.NODE_ANNOTATION) != node:
            out.append(f"{pod_name}: on node {node!r}, planned {notes.get(podcontract.NODE_ANNOTATION)!r}")
        indices = [int(i) for i in notes.get(podcontract.GPUS_ANNOTATION, "").split(",") if i.strip()]
        capacity = int(((nodes.get(node) or {}).get("status") or {}).get("capacity", {}).get(GPU, 0))
        if len(set(indices)) != len(indices) or not all(0 <= i < capacity for i in indices):
            out.append(f"{pod_name}: {podcontract.GPUS_ANNOTATION} {indices} on a node of {capacity} GPUs")
        limit = _gpu_limit(pod)
        if fraction:
            if limit:
                out.append(f"{pod_name}: a shared-GPU pod with a whole-GPU limit {limit}")
            if len(indices) != 1:
                out.append(f"{pod_name}: {podcontract.GPUS_ANNOTATION} {indices}, one shared GPU asked for")
            if notes.get(GPU_MILLI_ANNOTATION) != str(fraction):
                out.append(f"{pod_name}: {GPU_MILLI_ANNOTATION} {notes.get(GPU_MILLI_ANNOTATION)!r}, gpuFraction "
                           f"{fraction}")
        else:
            if (limit or 0) != whole:
                out.append(f"{pod_name}: {GPU} limit {limit}, asked for {whole} per replica")
            if len(indices) != whole:
                out.append(f"{pod_name}: {podcontract.GPUS_ANNOTATION} {indices}, asked for {whole} GPUs")
        product = ((nodes.get(node) or {}).get("metadata") or {}).get("labels", {}).get(PRODUCT_LABEL)
        if spec.get("gpuProduct") and product != spec["gpuProduct"]:
            out.append(f"{pod_name}: on a {product} node, gpuProduct {spec['gpuProduct']}")
        if spec.get("priorityClassName") and pod["spec"].get("priorityClassName") != spec["priorityClassName"]:
            out.append(f"{pod_name}: priorityClassName {pod['spec'].get('priorityClassName')!r}")
        index = int(meta.get("labels", {}).get(podcontract.POD_INDEX_LABEL, -1))
        entry = placed.get(index) or {}
        if (entry.get("node"), entry.get("gpus")) != (node, indices):
            out.append(f"{pod_name}: status.placement says {entry}, the pod is on {node} GPUs {indices}")
    required = (spec.get("topology") or {}).get("required")
    used = [nodes.get(p["spec"].get("nodeName")) or {} for p in pods]
    if required == "node" and len({p["spec"].get("nodeName") for p in pods}) > 1:
        out.append("topology.required node, pods on several nodes")
    elif required in LEVEL_LABELS and len({p["spec"].get("nodeName") for p in pods}) > 1:
        domains = {(n.get("metadata") or {}).get("labels", {}).get(LEVEL_LABELS[required]) for n in used}
        if len(domains) != 1 or None in domains:
            out.append(f"topology.required {required}, pods in {sorted(map(str, domains))}")
    out += _framework_problems(cluster, job, pods)
    out += _condition_problems(cluster.get_json("gpujob", name, "-n", ns))
    # status.placement names the one domain of its level that holds every pod (kubectl gang nodes and
    # the job's Admitted message say it to users).
    placement = status.get("placement") or {}
    level, domain = placement.get("level"), placement.get("domain")
    if level in LEVEL_LABELS:
        held = {(n.get("metadata") or {}).get("labels", {}).get(LEVEL_LABELS[level]) for n in used}
        if held != {domain}:
            out.append(f"status.placement level {level} domain {domain!r}, the pods are in {sorted(map(str, held))}")
    return out


def _framework_problems(cluster: Any, job: dict[str, Any], pods: list[dict[str, Any]]) -> list[str]:
    """What docs/api.md's `framework` promises the pods, not there: the rendezvous env (torchrun) or the
    mounted hostfile (mpi) in every container, and the headless Service named after the job."""
    framework = job["spec"].get("framework", "none")
    if framework == "none":
        return []
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    replicas, out = int(job["spec"].get("replicas", 1)), []
    service = cluster.get_json("service", name, "-n", ns)
    if service["spec"].get("clusterIP") != "None":
        out.append(f"Service {name}: clusterIP {service['spec'].get('clusterIP')!r}, not headless")
    hostfile = "/etc/kubegang/mpi/hostfile"
    for pod in pods:
        index = pod["metadata"].get("labels", {}).get(podcontract.POD_INDEX_LABEL)
        if framework == "torchrun":
            expected = {"MASTER_ADDR": f"{name}-0.{name}.{ns}.svc", "WORLD_SIZE": str(replicas), "RANK": index}
        else:
            expected = {"OMPI_MCA_orte_default_hostfile": hostfile, "KUBEGANG_HOSTFILE": hostfile}
        for container in pod["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env") or []}
            wrong = {k: env.get(k) for k, v in expected.items() if env.get(k) != v}
            if wrong:
                where = f"{pod['metadata']['name']}/{container['name']}"
                out.append(f"{where}: {framework} env {wrong}, expected {expected}")
    if framework == "mpi":
        lines = cluster.get_json("configmap", f"{name}-hostfile", "-n", ns)["data"]["hostfile"].splitlines()
        if len(lines) != replicas or not all(line.startswith(f"{name}-{i}.{name}.{ns}.svc slots=")
                                             for i, line in enumerate(lines)):
            out.append(f"ConfigMap {name}-hostfile: {lines}")
    return out


def _condition_problems(job: dict[str, Any]) -> list[str]:
    """What a Running job's conditions say that docs/api.md does not promise: metav1.Conditions, one
    per type, the phase's own True and none that contradicts it, observedGeneration current."""
    status, generation = job.get("status") or {}, job["metadata"]["generation"]
    conditions = status.get("conditions") or []
    by_type = {c.get("type"): c for c in conditions}
    out: list[str] = []
    if len(by_type) != len(conditions):
        out.append(f"conditions repeat a type: {[c.get('type') for c in conditions]}")
    for ctype in ("Admitted", "Running"):
        if (by_type.get(ctype) or {}).get("status") != "True":
            out.append(f"condition {ctype} is {by_type.get(ctype)!r}, not True")
    out += [f"condition {t} True while Running" for t in NOT_WHILE_RUNNING
            if (by_type.get(t) or {}).get("status") == "True"]
    for c in conditions:
        well_formed = (c.get("status") in ("True", "False") and CAMEL_CASE.match(str(c.get("reason")))
                       and c.get("message"))
        if not well_formed:
            out.append(f"condition {c.get('type')}: status/reason/message {c.get('status')!r} {c.get('reason')!r} "
                       f"{c.get('message')!r}")
        try:
            dt.datetime.fromisoformat(str(c.get("lastTransitionTime")).replace("Z", "+00:00"))
        except ValueError:
            out.append(f"condition {c.get('type')}: lastTransitionTime {c.get('lastTransitionTime')!r}")
    if status.get("reason") != (by_type.get("Running") or {}).get("reason"):
        out.append(f"status.reason {status.get('reason')!r} is not the Running condition's reason")
    if status.get("observedGeneration") != generation or (by_type.get("Admitted") or {}).get(
            "observedGeneration") != generation:
        out.append(f"observedGeneration {status.get('observedGeneration')!r} (Admitted condition "
                   f"{(by_type.get('Admitted') or {}).get('observedGeneration')!r}), metadata.generation {generation}")
    return out


def _leaves(path: Path) -> list[dict[str, Any]]:
    queues = _kind(path, "GPUQueue")
    parents = {(q.get("spec") or {}).get("parent") for q in queues}
    return [q for q in queues if q["metadata"]["name"] not in parents]


def _probe_jobs(path: Path) -> list[dict[str, Any]]:
    """For a file of queues: one 8-GPU pod per leaf, of the leaf's first flavour, in its first
    namespace. The queues work when these run and the leaf's status counts them."""
    return [{
        "apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
        "metadata": {"name": f"probe-{queue['metadata']['name']}", "namespace": queue["spec"]["namespaces"][0]},
        "spec": {"queue": queue["metadata"]["name"], "gpuProduct": queue["spec"]["resources"][0]["flavor"],
                 "template": {"spec": {"containers": [{"name": "main", "image": "probe:1",
                                                       "resources": {"limits": {GPU: 8}}}]}}},
    } for queue in _leaves(path)]


def _clean(cluster: Any, path: Path, extra: list[dict[str, Any]]) -> None:
    """Delete the case's jobs (and wait for their pods), then its queues and the demo's."""
    jobs = [*_kind(path, "GPUJob"), *extra]
    if extra:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", "--timeout=120s",
                        input=yaml.safe_dump_all(extra), check=False)
    cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait=true", "--timeout=120s", check=False)
    for job in jobs:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        cluster.wait_for(f"pods of {ns}/{name} gone", lambda ns=ns, name=name: not cluster.get_json(
            "pods", "-n", ns, "-l", f"{podcontract.JOB_NAME_LABEL}={name}")["items"], timeout=120, interval=1)
    cluster.kubectl("delete", "-f", str(QUEUES), "--ignore-not-found", "--wait=true", "--timeout=60s", check=False)


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_example_runs_as_shipped_on_the_demo_cluster(demo: Any, path: Path) -> None:
    cluster = demo
    jobs = _kind(path, "GPUJob")
    probes = _probe_jobs(path)
    assert jobs or probes, f"{_case_id(path)} has neither GPUJobs nor GPUQueues to try"
    try:
        # As a user runs it: the demo's queues and the example, in one kubectl apply.
        cluster.kubectl("apply", "-f", str(QUEUES), "-f", str(path))
        if probes:
            cluster.apply(probes)
        running, failures = _wait_running(cluster, [*jobs, *probes])
        for job in [*jobs, *probes]:
            key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
            if key in running and (problems := _problems(cluster, job, running[key])):
                failures[key] = "; ".join(problems)
        for queue in _leaves(path):
            name = queue["metadata"]["name"]
            flavor = queue["spec"]["resources"][0]["flavor"]

            def counted(name: str = name, flavor: str = flavor) -> bool:
                usage = (cluster.get_json("gpuqueue", name).get("status") or {}).get("usage") or []
                return {"flavor": flavor, "gpus": 8} in usage

            try:
                cluster.wait_for(f"GPUQueue {name} status.usage to count the probe's 8 {flavor}", counted,
                                 timeout=30, interval=1)
            except AssertionError as exc:
                failures[f"queue {name}"] = str(exc)
        assert not failures, f"{_case_id(path)}:\n" + "\n".join(f"  {k}: {v}" for k, v in failures.items())
    finally:
        _clean(cluster, path, probes)


def test_the_demo_queues_comments_hold_borrowing_limit_and_flavour_order(demo: Any) -> None:
    """examples/demo/queues.yaml's comments: team-a holds at most 768 H100s (its 512 and the 256 team-b
    lends), and a job without spec.gpuProduct tries the leaf's first flavour, H100s, first."""
    cluster = demo

    def job(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
                "metadata": {"name": name, "namespace": "team-a"},
                "spec": {"queue": "team-a", "replicas": replicas, **spec, "template": {"spec": {"containers": [
                    {"name": "main", "image": "probe:1", "resources": {"limits": {GPU: 8}}}]}}}}

    jobs = [job("beyond-768", 97, gpuProduct="NVIDIA-H100-80GB-HBM3"), job("any-product", 1)]
    try:
        cluster.kubectl("apply", "-f", str(QUEUES))
        cluster.apply(jobs)

        def status(name: str) -> dict[str, Any]:
            return dict(cluster.get_json("gpujob", name, "-n", "team-a").get("status") or {})

        cluster.wait_for("beyond-768 Unschedulable", lambda: status("beyond-768").get("phase") == "Unschedulable",
                         timeout=60, interval=1)
        too_big = status("beyond-768")
        assert too_big["reason"] == "ExceedsQueueCapacity", too_big
        message = next(c["message"] for c in too_big["conditions"] if c["type"] == "Unschedulable")
        assert "can never hold 776 NVIDIA-H100-80GB-HBM3: at most 768" in message, message
        cluster.wait_for("any-product Running", lambda: status("any-product").get("phase") == "Running",
                         timeout=RUNNING_TIMEOUT, interval=1)
        [pod] = _pods(cluster, "team-a", "any-product")
        node = cluster.get_json("node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"][PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3", node["metadata"]["labels"]
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", "--timeout=120s",
                        input=yaml.safe_dump_all(jobs), check=False)
        cluster.wait_for("any-product's pod gone", lambda: not _pods(cluster, "team-a", "any-product"),
                         timeout=120, interval=1)
        cluster.kubectl("delete", "-f", str(QUEUES), "--ignore-not-found", "--wait=true", "--timeout=60s",
                        check=False)


def test_the_demo_priority_classes_order_who_yields_research_low_first(demo: Any) -> None:
    """examples/demo/priorityclasses.yaml: research-low jobs yield to everything else (the first to be
    preempted), research-high ones go ahead of ordinary ones and, where the queue allows, preempt them.
    team-b (withinQueue: LowerPriority) holds the demo tree's 64 H200s with a research-low gang; an
    ordinary gang evicts it; a research-high gang of all 64 then evicts the ordinary one."""
    cluster = demo

    def job(name: str, replicas: int, priority_class: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"queue": "team-b", "replicas": replicas, "gpuProduct": "NVIDIA-H200",
                                "template": {"spec": {"containers": [
                                    {"name": "main", "image": "probe:1", "resources": {"limits": {GPU: 8}}}]}}}
        if priority_class:
            spec["priorityClassName"] = priority_class
        return {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
                "metadata": {"name": name, "namespace": "team-b"}, "spec": spec}

    def status(name: str) -> dict[str, Any]:
        return dict(cluster.get_json("gpujob", name, "-n", "team-b").get("status") or {})

    def preempted_by(name: str, by: str) -> bool:
        cond: dict[str, Any] = next(
            (c for c in status(name).get("conditions") or [] if c.get("type") == "Preempted"), {})
        return cond.get("status") == "True" and f"team-b/{by}" in str(cond.get("message"))

    def running(name: str) -> bool:
        return status(name).get("phase") == "Running"

    jobs = [job("low", 8, "research-low"), job("ordinary", 4), job("high", 8, "research-high")]
    try:
        cluster.kubectl("apply", "-f", str(QUEUES), "-f", str(PRIORITY_CLASSES))
        cluster.apply(jobs[0])  # 64 H200s: team-b's 32 and the 32 team-a lends
        cluster.wait_for("low Running", lambda: running("low"), timeout=RUNNING_TIMEOUT, interval=1)
        cluster.apply(jobs[1])
        cluster.wait_for("low preempted by ordinary", lambda: preempted_by("low", "ordinary"), timeout=60, interval=1)
        cluster.wait_for("ordinary Running", lambda: running("ordinary"), timeout=RUNNING_TIMEOUT, interval=1)
        assert status("low").get("phase") == "Queued", status("low")
        cluster.apply(jobs[2])
        cluster.wait_for("ordinary preempted by high", lambda: preempted_by("ordinary", "high"), timeout=60,
                         interval=1)
        cluster.wait_for("high Running", lambda: running("high"), timeout=RUNNING_TIMEOUT, interval=1)
        assert len(_pods(cluster, "team-b", "high")) == 8
        assert {status(n).get("phase") for n in ("low", "ordinary")} == {"Queued"}
        # research-low, waiting, never took anything back from either.
        assert not _pods(cluster, "team-b", "low")
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", "--timeout=120s",
                        input=yaml.safe_dump_all(jobs), check=False)
        for j in jobs:
            name = j["metadata"]["name"]
            cluster.wait_for(f"{name}'s pods gone", lambda name=name: not _pods(cluster, "team-b", name),
                             timeout=120, interval=1)
        cluster.kubectl("delete", "-f", str(QUEUES), "--ignore-not-found", "--wait=true", "--timeout=60s",
                        check=False)
