"""What a GPUJob's watchers cost the API server, against what its status writes cost it.

    .venv/bin/python -m bench.e2e.watch_cost --cluster-dir DIR [--jobs 1000] [--rounds 2] [--watchers 4]

In the end-to-end benchmark's kubegang half four clients watch GPUJobs: the operator's leader, the
extender, the benchmark's own observer, and kube-controller-manager's garbage collector (metadata
only). The API server sends each of them every status write. Whether those watches are part of the
API server's extra CPU in that half is measured here, on a running ``hack/cluster`` control plane
(kubegang's own processes need not run): the burst's GPUJobs are applied as a copy of the real CRD
(``bench.e2e.apply_floor``'s ``crd-full``: the schema and CEL rules, in a group no controller watches),
then each object's two status writes (Admitted, Running, built by the operator's own code) are made
with no extra watcher, with ``--watchers`` clients watching the collection as full objects, and with as
many watching it as metadata only (the garbage collector's form). The configurations take turns,
``--rounds`` times, in fresh namespaces. The figure is the API server's CPU (its /proc counters) over
the writes and 2 s after them, so run it on an otherwise idle cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.e2e import _harness as harness
from bench.e2e import _kube as kube
from bench.e2e import _procstats as procstats
from bench.e2e._workload import deal, generate, leaf_names
from bench.e2e.apply_floor import GROUP, PLURALS, floor_crds, manifests, write_statuses
from bench.e2e.run import kubectl_path

VARIANT = "crd-full"
METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
SETTLE_S = 2.0
"""Before the writes (the watches are established) and after them (the last events are sent)."""


def _watch(target: harness.Target, path: str, metadata: bool, stop: threading.Event, seen: list[int]) -> None:
    headers = {"Accept": METADATA_ACCEPT} if metadata else {}
    with target.api.client(None) as client, client.stream(
            "GET", path, params={"watch": "true"}, headers=headers) as response:
        for _ in response.iter_lines():
            seen[0] += 1
            if stop.is_set():
                return


def one(target: harness.Target, jobs: list[Any], watchers: int, metadata: bool, round_: int) -> dict[str, Any]:
    """Apply the objects, start the watchers, make the status writes; the API server's CPU for them."""
    form = "none" if not watchers else ("metadata" if metadata else "full")
    namespace = f"watch-{form}-{round_}-{time.strftime('%H%M%S')}"
    kube.kubectl(target.kubectl, target.kubeconfig, "create", "namespace", namespace)
    kube.apply_parallel(target.kubectl, target.kubeconfig, deal(manifests(VARIANT, jobs, namespace), 4))
    version = manifests(VARIANT, jobs[:1], namespace)[0]["apiVersion"]
    path = f"/apis/{version}/namespaces/{namespace}/{PLURALS[VARIANT]}"
    stop, seen = threading.Event(), [[0] for _ in range(watchers)]
    threads = [threading.Thread(target=_watch, args=(target, path, metadata, stop, s), daemon=True) for s in seen]
    for thread in threads:
        thread.start()
    time.sleep(SETTLE_S)
    before = procstats.sample_cluster(target.cluster_dir)
    seconds = write_statuses(target, VARIANT, jobs, namespace)
    time.sleep(SETTLE_S)
    cpu = procstats.window(before, procstats.sample_cluster(target.cluster_dir))
    stop.set()
    kube.kubectl(target.kubectl, target.kubeconfig, "delete", "namespace", namespace, "--timeout=600s")
    writes = 2 * len(jobs)
    server = cpu["kube-apiserver"]["cpu_seconds"]
    return {"watchers": watchers, "form": form, "round": round_, "status_writes": writes, "writes_s": round(seconds, 2),
            "apiserver_cpu_s": server, "apiserver_ms_per_write": round(1000 * server / writes, 2),
            "events_per_watcher": [s[0] for s in seen]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.e2e.watch_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster-dir", type=Path, required=True)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--watchers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results-watch-cost.json")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.rounds < 1 or args.watchers < 1:
        p.error("--jobs, --rounds and --watchers must be at least 1")
    cluster_dir = args.cluster_dir.resolve()
    target = harness.Target(cluster_dir / "kubeconfig", cluster_dir, kubectl_path())
    crd = next(c for c in floor_crds() if c["spec"]["names"]["plural"] == PLURALS[VARIANT])
    kube.kubectl(target.kubectl, target.kubeconfig, "apply", "--server-side", "-f", "-", input_text=json.dumps(crd))
    kube.kubectl(target.kubectl, target.kubeconfig, "wait", "--for=condition=Established", "crd",
                 f"{PLURALS[VARIANT]}.{GROUP}", "--timeout=60s")
    jobs = generate(args.jobs, args.seed, 10**6, 0.85, leaf_names(16))
    started, load0 = time.strftime("%Y-%m-%dT%H:%M:%S%z"), [round(x, 2) for x in os.getloadavg()]
    runs: list[dict[str, Any]] = []
    try:
        for round_ in range(args.rounds):
            for watchers, metadata in ((0, False), (args.watchers, False), (args.watchers, True)):
                res = one(target, jobs, watchers, metadata, round_)
                print(f"[watch-cost] {json.dumps(res)}", file=sys.stderr)
                runs.append(res)
    finally:
        kube.kubectl(target.kubectl, target.kubeconfig, "delete", "crd", f"{PLURALS[VARIANT]}.{GROUP}", "--wait=false")
    base = {r["round"]: r["apiserver_cpu_s"] for r in runs if r["form"] == "none"}
    for r in runs:
        if r["form"] != "none":
            events = args.watchers * r["status_writes"]
            extra_s = r["apiserver_cpu_s"] - base[r["round"]]
            r["apiserver_ms_per_event_per_watcher"] = round(1000 * extra_s / events, 3)
    out = {"command": "python -m bench.e2e.watch_cost " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started": started, "load_average_at_start": load0,
           "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "jobs": args.jobs, "runs": runs}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    for r in runs:
        extra = r.get("apiserver_ms_per_event_per_watcher")
        print(f"round {r['round']} {r['form']:8s} x{r['watchers']}: {r['apiserver_ms_per_write']:5.2f} ms of "
              "API-server CPU per status write"
              + (f", {extra:+.3f} ms per event per watcher" if extra is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
