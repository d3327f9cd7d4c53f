"""What it costs the API server to take in the burst's GPUJobs, against ConfigMaps that carry the same
bytes: the floor under the benchmark's GPUJob apply time.

    .venv/bin/python -m bench.e2e.apply_floor --cluster-dir /tmp/kg-perf --jobs 2000

On a running local control plane (``hack/cluster up``; kubegang's own processes need not run), it
applies the benchmark's GPUJobs, in the benchmark's way (parallel ``kubectl apply --server-side`` of
multi-document files), as each of:

- ``configmap``: a ConfigMap per job with the job's spec as one JSON string (built-in type, no schema);
- ``crd-full``: kind GPUJob of a copy of crds/gpujobs.kubegang.io.yaml under the group
  ``floor.kubegang.io`` (no controller watches it): the real schema and CEL rules;
- ``crd-no-cel``: the same copy without any ``x-kubernetes-validations``;
- ``crd-open``: a copy whose spec is ``x-kubernetes-preserve-unknown-fields`` (no schema under it).

Each variant runs in a fresh namespace, ``--rounds`` times in rotation (the machine is shared: the
rotation spreads load changes over every variant), and reports the slowest applier's seconds, the
API server's and kubectl's CPU seconds, and the API server's own request seconds for the creates;
``best`` is each variant's least over the rounds.

``--status-writes`` (default on) then writes, for every object, the two status patches the operator
writes for a job that is admitted and starts (Admitted with its placement, then Running), built by the
operator's own status code, as merge patches to the ``status`` subresource (to the ConfigMap itself,
under a ``status`` key, for ``configmap``), and reports the API server's CPU for those writes alone:
what a status write costs by form, the CEL rules' share included (the API server evaluates every
rule of the object, the spec's too, on each status write).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.e2e import _harness as harness
from bench.e2e import _kube as kube
from bench.e2e import _procstats as procstats
from bench.e2e._workload import deal, generate, gpujob_manifest, leaf_names
from bench.e2e.run import REPO, kubectl_path
from kubegang.api import GPUJobStatus, Placement, ReplicaPlacement
from kubegang.operator._conditions import Phase, transition
from kubegang.operator._job import status_fields

GROUP = "floor.kubegang.io"
VARIANTS = ("configmap", "crd-full", "crd-no-cel", "crd-open")


def _strip_cel(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_cel(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_strip_cel(v) for v in node]
    return node


def floor_crds() -> list[dict[str, Any]]:
    """The three copies of the GPUJob CRD, one kind each, in the floor group."""
    source = yaml.safe_load((REPO / "crds" / "gpujobs.kubegang.io.yaml").read_text())
    out = []
    for variant, plural in (("crd-full", "fulljobs"), ("crd-no-cel", "noceljobs"), ("crd-open", "openjobs")):
        crd = copy.deepcopy(source)
        kind = {"fulljobs": "FullJob", "noceljobs": "NoCelJob", "openjobs": "OpenJob"}[plural]
        crd["metadata"] = {"name": f"{plural}.{GROUP}", "labels": {"kubegang.io/bench": "apply-floor"}}
        crd["spec"]["group"] = GROUP
        crd["spec"]["names"] = {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"}
        crd["spec"].pop("conversion", None)
        for version in crd["spec"]["versions"]:
            version.pop("additionalPrinterColumns", None)
            schema = version["schema"]["openAPIV3Schema"]
            if variant == "crd-no-cel":
                version["schema"]["openAPIV3Schema"] = _strip_cel(schema)
            elif variant == "crd-open":
                version.pop("selectableFields", None)  # they name schema fields the open copy has not
                schema["properties"]["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                schema["properties"]["status"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                schema.pop("x-kubernetes-validations", None)
        out.append(crd)
    return out


def manifests(variant: str, jobs: list[Any], namespace: str) -> list[dict[str, Any]]:
    real = [gpujob_manifest(j, namespace) for j in jobs]
    if variant == "configmap":
        return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": d["metadata"],
                 "data": {"spec": json.dumps(d["spec"])}} for d in real]
    kind = {"crd-full": "FullJob", "crd-no-cel": "NoCelJob", "crd-open": "OpenJob"}[variant]
    version = real[0]["apiVersion"].split("/")[1]
    return [{**d, "apiVersion": f"{GROUP}/{version}", "kind": kind} for d in real]


PLURALS = {"crd-full": "fulljobs", "crd-no-cel": "noceljobs", "crd-open": "openjobs"}
STATUS_WRITERS = 16
"""Status writes in flight at once (the operator's creation concurrency is 32, its writes share one pool)."""


def status_patches(job: Any, node_gpus: int = 8) -> list[dict[str, Any]]:
    """The operator's two status writes for ``job`` admitted and started, in its own code's words."""
    now = dt.datetime.now(dt.UTC)
    placement = Placement(level="leaf", domain="su1-rail-leaves", pods=[
        ReplicaPlacement(index=i, node=f"node-{i:04d}", gpus=list(range(min(job.gpus_per_pod, node_gpus))))
        for i in range(job.pods)])
    message = f"admitted to queue {job.queue} on {job.pods} nodes in su1-rail-leaves; creating {job.pods} pods"
    admitted = transition({}, Phase.ADMITTED, "Admitted", message, now=now, observed_generation=1)
    admitted |= status_fields(GPUJobStatus(placement=placement, admitted_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                           ready_replicas=0, total_gpus=job.gpus, queue_position=None))
    running = transition(admitted, Phase.RUNNING, "AllReplicasRunning", f"all {job.pods} replicas running", now=now)
    running |= status_fields(GPUJobStatus(started_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"), ready_replicas=job.pods))
    return [admitted, running]


def write_statuses(target: harness.Target, variant: str, jobs: list[Any], namespace: str) -> float:
    """Every job's status patches, ``STATUS_WRITERS`` at a time; returns the wall seconds."""
    version = gpujob_manifest(jobs[0], namespace)["apiVersion"].split("/")[1]
    base = (f"/api/v1/namespaces/{namespace}/configmaps" if variant == "configmap"
            else f"/apis/{GROUP}/{version}/namespaces/{namespace}/{PLURALS[variant]}")
    batches = [jobs[i::STATUS_WRITERS] for i in range(STATUS_WRITERS)]

    def worker(batch: list[Any]) -> None:
        with target.api.client(120.0) as c:
            for job in batch:
                for patch in status_patches(job):
                    if variant == "configmap":
                        path, body = f"{base}/{job.name}", {"data": {"status": json.dumps(patch)}}
                    else:
                        path, body = f"{base}/{job.name}/status", {"status": patch}
                    r = c.patch(path, content=json.dumps(body),
                                headers={"Content-Type": "application/merge-patch+json"})
                    r.raise_for_status()

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=STATUS_WRITERS) as pool:
        list(pool.map(worker, batches))
    return time.monotonic() - t0


def _kubectl_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(target: harness.Target, variant: str, docs: list[dict[str, Any]], namespace: str,
        appliers: int, jobs: list[Any] | None = None) -> dict[str, Any]:
    kube.kubectl(target.kubectl, target.kubeconfig, "create", "namespace", namespace)
    before, kubectl0 = procstats.sample_cluster(target.cluster_dir), _kubectl_cpu()
    requests0 = harness.apiserver_requests(target)
    apply_s = kube.apply_parallel(target.kubectl, target.kubeconfig, deal(docs, appliers))
    after, kubectl1 = procstats.sample_cluster(target.cluster_dir), _kubectl_cpu()
    window = harness.apiserver_window(requests0, harness.apiserver_requests(target), len(docs), len(docs))
    cpu = procstats.window(before, after)
    status: dict[str, Any] = {}
    if jobs:
        s0, requests1 = procstats.sample_cluster(target.cluster_dir), harness.apiserver_requests(target)
        seconds = write_statuses(target, variant, jobs, namespace)
        s1 = procstats.sample_cluster(target.cluster_dir)
        written = harness.apiserver_window(requests1, harness.apiserver_requests(target), len(jobs), len(jobs))
        status_cpu = procstats.window(s0, s1)
        status = {"status_s": round(seconds, 2), "status_writes": sum(
                      n for k, n in written["writes"].items() if k.startswith("PATCH")),
                  "status_apiserver_cpu_s": status_cpu.get("kube-apiserver", {}).get("cpu_seconds"),
                  "status_etcd_cpu_s": status_cpu.get("etcd", {}).get("cpu_seconds")}
    # Waited for: a namespace's objects are deleted one by one in the background, which would bill
    # the next variant for this one's clean-up.
    kube.kubectl(target.kubectl, target.kubeconfig, "delete", "namespace", namespace, "--timeout=600s")
    creates = {k: v for k, v in window["request_seconds"].items() if k.startswith(("APPLY", "PATCH", "POST"))}
    return {"variant": variant, "apply_s": round(max(apply_s), 2),
            "apiserver_cpu_s": cpu.get("kube-apiserver", {}).get("cpu_seconds"),
            "etcd_cpu_s": cpu.get("etcd", {}).get("cpu_seconds"),
            "kubectl_cpu_s": round(kubectl1 - kubectl0, 2), "apiserver_write_seconds": creates, **status}


def summarize(runs: list[dict[str, Any]], variants: list[str]) -> dict[str, dict[str, float]]:
    """Per variant, the best (smallest) of its rounds: on a shared machine noise only ever adds (another
    process's burst, the agent's periodic resync), so the floor is the least a variant was seen to cost."""
    keys = ("apply_s", "apiserver_cpu_s", "kubectl_cpu_s", "status_s", "status_apiserver_cpu_s")
    return {v: {k: min(x[k] for x in runs if x["variant"] == v) for k in keys if all(k in x for x in runs)}
            for v in variants}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.e2e.apply_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster-dir", type=Path, required=True)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--appliers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--status-writes", action=argparse.BooleanOptionalAction, default=True,
                   help="then write each object's two status patches (Admitted, Running) and measure them")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results-apply-floor.json")
    args = p.parse_args(argv)
    cluster_dir = args.cluster_dir.resolve()
    target = harness.Target(cluster_dir / "kubeconfig", cluster_dir, kubectl_path())
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        p.error(f"--variants: unknown {unknown}; allowed: {', '.join(VARIANTS)}")
    kube.kubectl(target.kubectl, target.kubeconfig, "apply", "--server-side", "-f", "-",
                 input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": floor_crds()}))
    kube.kubectl(target.kubectl, target.kubeconfig, "wait", "--for=condition=Established", "crd",
                 "-l", "kubegang.io/bench=apply-floor", "--timeout=60s")
    jobs = generate(args.jobs, args.seed, 10**6, 0.85, leaf_names(16))
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    load0 = [round(x, 2) for x in os.getloadavg()]
    runs = []
    try:
        for r in range(args.rounds):
            for variant in variants:
                ns = f"floor-{variant}-{r}-{time.strftime('%H%M%S')}"
                res = one(target, variant, manifests(variant, jobs, ns), ns, args.appliers,
                          jobs if args.status_writes else None)
                print(f"[floor] round {r} {variant}: {res}", file=sys.stderr)
                runs.append(res)
    finally:
        kube.kubectl(target.kubectl, target.kubeconfig, "delete", "crd", "-l", "kubegang.io/bench=apply-floor",
                     "--wait=false")
    best = summarize(runs, variants)
    out = {"command": "python -m bench.e2e.apply_floor " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started": started, "load_average_at_start": load0,
           "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
           "jobs": args.jobs, "appliers": args.appliers, "runs": runs, "best": best}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    for v, m in best.items():
        line = (f"{v:12s} apply {m['apply_s']:7.2f} s  apiserver {m['apiserver_cpu_s']:7.2f} CPU-s  "
                f"kubectl {m['kubectl_cpu_s']:7.2f} CPU-s")
        if "status_apiserver_cpu_s" in m:
            line += (f"  status writes {m['status_s']:7.2f} s, apiserver {m['status_apiserver_cpu_s']:7.2f} CPU-s "
                     f"({1000 * m['status_apiserver_cpu_s'] / (2 * args.jobs):.2f} ms each)")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
