"""Issue 13's short-job sweep end to end: 1-GPU trials through one queue while training gangs hold most
of the cluster, through kubegang and as plain kube-scheduler pods, in one run.

    .venv/bin/python -m bench.e2e.sweep           # 500 trials of 6 s, 64 in flight, superpod-h100
    .venv/bin/python -m bench.e2e.sweep --quick   # 64 trials of 6 s, 16 in flight (a few minutes)

It starts its own control plane in ``--cluster-dir`` (default /tmp/kubegang-sweep-cluster), or reuses
one already running there; runs the baseline half with kube-scheduler alone, then ``hack/cluster
kubegang up`` and the kubegang half; writes bench/e2e/results-sweep.json and docs/benchmarks-sweep.md;
stops what it started (``--keep`` leaves it up). The objects are described in
bench/e2e/_sweep_workload.py, the driver in bench/e2e/_sweep_driver.py, the overhead in
bench/_sweep_overhead.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make `bench` and `kubegang` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.e2e import _harness as harness
from bench.e2e import _sweep_report as report
from bench.e2e import _sweep_workload as workload
from bench.e2e._sweep_halves import delete_queues, run_half
from bench.e2e.run import HACK, REPO, check_code_unchanged, code, hack, kubectl_path, machine, running, versions

RESULTS = Path(__file__).resolve().parent / "results-sweep.json"
DOC = REPO / "docs" / "benchmarks-sweep.md"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.e2e.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="64 trials, 16 in flight (2 free nodes)")
    p.add_argument("--trials", type=int, default=None, help="trials in the sweep (default 500, quick 64)")
    p.add_argument("--runtime", type=float, default=6.0,
                   help="seconds each trial runs (default 6: the seed's 5-minute trials scaled down 50x)")
    p.add_argument("--free-nodes", type=int, default=None,
                   help="8-GPU nodes the training gangs leave free (default 8, quick 2)")
    p.add_argument("--concurrency", type=int, default=None, help="trials in flight (default: the free GPUs)")
    p.add_argument("--gang-nodes", type=int, default=8, help="nodes per training gang")
    p.add_argument("--shape", default="superpod-h100", help="hack/shapes/<name>.yaml")
    p.add_argument("--operators", type=int, default=2, help="operator replicas (one leader admits)")
    p.add_argument("--timeout", type=float, default=900, help="seconds each half's sweep may take")
    p.add_argument("--stall", type=float, default=90, help="give up a half after this long without a trial ending")
    p.add_argument("--cluster-dir", type=Path, default=Path("/tmp/kubegang-sweep-cluster"))
    p.add_argument("--keep", action="store_true", help="leave the control plane running afterwards")
    p.add_argument("--only", choices=["plain", "kubegang"], default=None, help="run one half only")
    p.add_argument("--note", default="", help="a sentence for the report")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--doc", type=Path, default=DOC)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n_trials = args.trials or (64 if args.quick else 500)
    free_nodes = args.free_nodes or (2 if args.quick else 8)
    cluster_dir = args.cluster_dir.resolve()
    command = "python -m bench.e2e.sweep " + " ".join(argv if argv is not None else sys.argv[1:])
    out: dict[str, Any] = {
        "command": command.strip(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
        "uptime_at_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "versions": versions(), "code": code(), "shape": args.shape, "operators": args.operators, "note": args.note,
        "errors": [],
    }
    print(f"[sweep] {out['uptime_at_start']}", file=sys.stderr)
    started_here = not running(cluster_dir)
    target = harness.Target(cluster_dir / "kubeconfig", cluster_dir, kubectl_path())
    settings = harness.HalfSettings(appliers=1, timeout_s=args.timeout, stall_s=args.stall)
    try:
        if started_here:
            out["cluster_up_s"] = hack(cluster_dir, "up", "--shape", str(HACK / "shapes" / f"{args.shape}.yaml"))
        nodes = harness.gpu_nodes(target)
        plan = workload.plan(nodes, len(nodes) - free_nodes, args.gang_nodes, n_trials, args.runtime, args.concurrency)
        out["workload"] = workload.describe(plan, sum(nodes.values()), len(nodes))
        print(f"[sweep] {json.dumps(out['workload'])}", file=sys.stderr)
        stamp = time.strftime("%H%M%S")
        cleanup_s = 300 + 0.2 * (n_trials + out["workload"]["training_pods"])
        if args.only in (None, "plain"):
            if (cluster_dir / "kubegang.json").exists():
                hack(cluster_dir, "kubegang", "down")  # the baseline runs without the extender
            ns = f"sweep-plain-{stamp}"
            print("[sweep] baseline: plain pods, kube-scheduler alone", file=sys.stderr)
            try:
                out["plain"] = run_half(target, plan, ns, settings, kubegang=False)
            finally:
                harness.cleanup(target, ns, gpujobs=False, timeout=cleanup_s)
        if args.only in (None, "kubegang"):
            print("[sweep] kubegang: hack/cluster kubegang up", file=sys.stderr)
            out["kubegang_up_s"] = hack(cluster_dir, "kubegang", "up", "--operators", str(args.operators))
            check_code_unchanged(out, "kubegang")
            out["gc_settle_s"] = harness.settle_garbage_collector(target)
            ns = f"sweep-kubegang-{stamp}"
            print("[sweep] kubegang: the sweep as 1-replica GPUJobs", file=sys.stderr)
            try:
                out["kubegang"] = run_half(target, plan, ns, settings, kubegang=True)
            finally:
                harness.cleanup(target, ns, gpujobs=True, timeout=cleanup_s)
                delete_queues(target)
    except (RuntimeError, TimeoutError, OSError, ValueError, httpx.HTTPError) as exc:
        out["errors"].append(f"{type(exc).__name__}: {exc}")
        print(f"[sweep] ERROR: {exc}", file=sys.stderr)
    finally:
        if started_here and not args.keep:
            try:
                hack(cluster_dir, "down")
            except RuntimeError as exc:
                out["errors"].append(str(exc))
    out["summary"] = report.summary(out)
    args.results.write_text(json.dumps(out, indent=2) + "\n")
    args.doc.write_text(report.markdown(out))
    print(report.table(out))
    print(report.steps_table(out))
    print(f"[sweep] wrote {args.results} and {args.doc}", file=sys.stderr)
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
