"""End-to-end throughput on the real local control plane: a burst of GPUJobs through kubegang, the same
jobs as batch Jobs through the real Kueue, and the same pods through the plain kube-scheduler, in one run.

    .venv/bin/python -m bench.e2e.run               # 2,000 jobs on bench-1024 (1,024 nodes x 8 GPUs)
    .venv/bin/python -m bench.e2e.run --quick       # 200 jobs on superpod-h100 (128 nodes x 8 GPUs)
    .venv/bin/python -m bench.e2e.run --contended   # a burst of 1.5x the cluster's GPUs, jobs that finish

It starts its own control plane in ``--cluster-dir`` (default /tmp/kubegang-bench-cluster, so a
cluster that tests use is never touched), or reuses one already running there; runs the baseline
with kube-scheduler alone, then the Kueue half (``hack/cluster addon kueue up``, bench/e2e/_kueue.py),
then ``hack/cluster kubegang up`` and the GPUJob burst; writes
bench/e2e/results.json and docs/benchmarks-e2e.md; stops what it started (``--keep`` leaves it up).
The workload generator is described in bench/e2e/_workload.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make `bench` and `kubegang` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.e2e import _gangs as gangs
from bench.e2e import _harness as harness
from bench.e2e import _kube as kube
from bench.e2e import _kueue as kueue
from bench.e2e import _report as report
from bench.e2e._workload import POD_WEIGHTS, describe, generate, leaf_names, mean_gpus_per_job

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"
RESULTS = Path(__file__).resolve().parent / "results.json"
DOC = REPO / "docs" / "benchmarks-e2e.md"
CONTENDED_RESULTS = Path(__file__).resolve().parent / "results-contended.json"
CONTENDED_DOC = REPO / "docs" / "benchmarks-e2e-contended.md"
CONTENDED_FILL = 1.5
CONTENDED_RUNTIME_S = 90
"""Long enough that a queue of 1.5x the cluster keeps it full if the control loop admits a few jobs a
second (30 s left the cluster half idle behind admission on a loaded 2-core machine, which measures
throughput again, not what a queue does while jobs wait)."""


def versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (HACK / "versions.env").read_text().splitlines()
             if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def code() -> dict[str, Any]:
    """Which kubegang the run's processes import, and its commit; raises when it is not this checkout's.

    kubegang's processes are started as ``python -m kubegang.<process>`` from the cluster folder, so they
    import what this interpreter finds first. The project's virtual environment installs the package in
    editable mode, pointing at the checkout it was made in: run from another worktree (a "before" side of
    an A/B) with that environment, every process would run the first checkout's code while the results
    named the worktree. ``PYTHONPATH=<worktree>`` makes it import the worktree's own."""
    import kubegang

    package = Path(kubegang.__file__).resolve().parent
    if not package.is_relative_to(REPO):
        raise RuntimeError(f"this interpreter imports kubegang from {package}, not from this checkout ({REPO}): "
                           f"the processes would run that code; run with PYTHONPATH={REPO}")
    return {"kubegang_package": str(package), **git_state(REPO)}


def git_state(repo: Path) -> dict[str, Any]:
    """``repo``'s commit, whether tracked files differ from it, and a digest of that difference (so an
    edit to a tree that was already dirty is seen too)."""
    git = ["git", "-C", str(repo)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    diff = subprocess.run([*git, "diff", "HEAD"], capture_output=True).stdout
    return {"commit": head, "uncommitted_changes": bool(diff),
            "uncommitted_digest": hashlib.sha1(diff).hexdigest() if diff else None}


def check_code_unchanged(out: dict[str, Any], half: str) -> None:
    """Record in ``out`` if the checkout changed between the run's start and ``half``'s processes starting.

    kubegang's processes start with their half, minutes after ``code()`` was recorded, and import the
    checkout as it is then: an edit made meanwhile runs, unnamed, under the start's commit. That
    happened once (a full-size page run of the 33rd session, whose kubegang half ran an uncommitted
    change), so the results now say so and the run warns."""
    now = code()
    if now != out["code"]:
        out.setdefault("code_changed_before", {})[half] = now
        print(f"[bench] warning: the checkout changed since this run began ({out['code']} -> {now}); the {half} "
              "half runs the changed code, and the results record both", file=sys.stderr)


def kubectl_path() -> str:
    cache = os.environ.get("KUBEGANG_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kubegang")
    return str(Path(cache) / f"kubernetes-{versions()['KUBERNETES_VERSION']}" / "bin" / "kubectl")


def hack(cluster_dir: Path, *args: str, timeout: float = 1800) -> float:
    """Run hack/cluster against ``cluster_dir``; its seconds. Raises with the tail of its log on failure."""
    t0 = time.monotonic()
    proc = subprocess.run([str(HACK / "cluster"), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "KUBEGANG_CLUSTER_DIR": str(cluster_dir)})
    if proc.returncode != 0:
        raise RuntimeError(f"hack/cluster {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return round(time.monotonic() - t0, 1)


def running(cluster_dir: Path) -> bool:
    return subprocess.run([str(HACK / "cluster"), "status"], capture_output=True,
                          env={**os.environ, "KUBEGANG_CLUSTER_DIR": str(cluster_dir)}).returncode == 0


def machine() -> dict[str, Any]:
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kib / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


HALVES = ("plain", "kueue", "kubegang")


def _halves(text: str) -> tuple[str, ...]:
    chosen = tuple(h.strip() for h in text.split(",") if h.strip())
    wrong = [h for h in chosen if h not in HALVES]
    if wrong or not chosen:
        raise argparse.ArgumentTypeError(f"--only: {', '.join(wrong) or 'nothing'} is not a half; "
                                         f"allowed: {', '.join(HALVES)}, comma-separated")
    return chosen


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.e2e.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="200 jobs on the superpod-h100 shape")
    p.add_argument("--jobs", type=int, default=None, help="GPUJobs in the burst (default 2000, quick 200)")
    p.add_argument("--shape", default=None, help="hack/shapes/<name>.yaml (default bench-1024, quick superpod-h100)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fill", type=float, default=None,
                   help=f"most of the cluster's GPUs the burst may request (default 0.85, contended {CONTENDED_FILL})")
    p.add_argument("--contended", action="store_true",
                   help=f"a burst of {CONTENDED_FILL}x the cluster's GPUs whose jobs finish (--runtime), so jobs "
                        "wait for each other; writes results-contended.json and benchmarks-e2e-contended.md")
    p.add_argument("--runtime", type=int, default=None,
                   help=f"seconds every pod runs (default: until deleted; contended {CONTENDED_RUNTIME_S})")
    p.add_argument("--leaves", type=int, default=16, help="leaf GPUQueues the jobs are dealt over")
    p.add_argument("--quota", type=float, default=1.0,
                   help="the leaves' nominal GPUs together, as a multiple of the cluster's (default 1; above 1, "
                        "jobs of a contended burst wait for GPUs rather than quota)")
    p.add_argument("--operators", type=int, default=2, help="operator replicas (one leader admits)")
    p.add_argument("--appliers", type=int, default=4, help="parallel kubectl apply processes")
    p.add_argument("--timeout", type=float, default=600, help="seconds each half may take to get all Running")
    p.add_argument("--stall", type=float, default=90, help="give up a half after this long without progress")
    p.add_argument("--cluster-dir", type=Path, default=Path("/tmp/kubegang-bench-cluster"))
    p.add_argument("--keep", action="store_true", help="leave the control plane running afterwards")
    p.add_argument("--only", type=_halves, default=HALVES, metavar="HALF[,HALF]",
                   help=f"run only these halves, comma-separated, of {', '.join(HALVES)} (default: all)")
    p.add_argument("--idle", type=float, default=30.0, metavar="SECONDS",
                   help="measure each process's CPU this long with kubegang up and no burst (0: not)")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="py-spy profiles of kubegang's processes during the kubegang half, into DIR")
    p.add_argument("--note", default="", help="a sentence for the report (e.g. why the run was scaled down)")
    p.add_argument("--discussion", default=None, metavar="TEXT",
                   help="with --render: what the figures mean, written after reading them, kept in the results")
    p.add_argument("--render", action="store_true",
                   help="run nothing: write the doc again from --results (adding --discussion when given)")
    p.add_argument("--results", type=Path, default=None, help="default bench/e2e/results[-contended].json")
    p.add_argument("--doc", type=Path, default=None, help="default docs/benchmarks-e2e[-contended].md")
    args = p.parse_args(argv)
    if not args.quota > 0:
        p.error(f"--quota: {args.quota} is not allowed; give a multiple of the cluster's GPUs above 0 (default 1)")
    args.fill = args.fill if args.fill is not None else CONTENDED_FILL if args.contended else 0.85
    args.runtime = args.runtime if args.runtime is not None else CONTENDED_RUNTIME_S if args.contended else None
    args.results = args.results or (CONTENDED_RESULTS if args.contended else RESULTS)
    args.doc = args.doc or (CONTENDED_DOC if args.contended else DOC)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        saved: dict[str, Any] = json.loads(args.results.read_text())
        if args.discussion is not None:
            saved["discussion"] = args.discussion
            args.results.write_text(json.dumps(saved, indent=2) + "\n")
        args.doc.write_text(report.markdown(saved))
        print(f"[bench] wrote {args.doc} from {args.results}", file=sys.stderr)
        return 0
    n_jobs = args.jobs
    shape = args.shape or ("superpod-h100" if args.quick else "bench-1024")
    cluster_dir = args.cluster_dir.resolve()
    command = "python -m bench.e2e.run " + " ".join(argv if argv is not None else sys.argv[1:])
    out: dict[str, Any] = {
        "command": command.strip(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
        "versions": versions(), "code": code(), "seed": args.seed, "shape": shape, "operators": args.operators,
        "appliers": args.appliers, "fill": args.fill, "leaves": args.leaves, "quota": args.quota, "note": args.note,
        "errors": [],
        "contended": args.contended, "runtime_s": args.runtime,
    }
    started_here = not running(cluster_dir)
    target = harness.Target(cluster_dir / "kubeconfig", cluster_dir, kubectl_path())
    try:
        if started_here:
            out["cluster_up_s"] = hack(cluster_dir, "up", "--shape", str(HACK / "shapes" / f"{shape}.yaml"))
        nodes = harness.gpu_nodes(target)
        capacity = sum(nodes.values())
        out["cluster"] = {"gpu_nodes": len(nodes), "gpus": capacity, "reused": not started_here}
        leaves = leaf_names(args.leaves)
        # A contended burst is sized to ask for ``fill`` x the cluster on average.
        n_jobs = n_jobs or (round(args.fill * capacity / mean_gpus_per_job()) if args.contended
                            else 200 if args.quick else 2000)
        jobs = generate(n_jobs, args.seed, capacity, args.fill, leaves, args.runtime)
        node_list, _ = kube.list_items(target.api, "/api/v1/nodes")
        domains = gangs.node_domains(node_list)
        out["workload"] = {**describe(jobs), "pod_weights": {str(k): v for k, v in POD_WEIGHTS.items()}}
        print(f"[bench] {out['workload']['jobs']} jobs, {out['workload']['pods']} pods, "
              f"{out['workload']['gpus']} of {capacity} GPUs on {len(nodes)} nodes", file=sys.stderr)
        # With a full cluster nothing may start until a pod's run time is over: that is no stall.
        stall_s = args.stall + (args.runtime or 0)
        settings = harness.HalfSettings(appliers=args.appliers, timeout_s=args.timeout, stall_s=stall_s,
                                        profile_dir=args.profile, quota=args.quota)
        stamp = time.strftime("%H%M%S")
        # The API server deletes a collection one object at a time (--delete-collection-workers=1):
        # 5,000 pods on a busy 2-core machine outlast a fixed 300 s.
        cleanup_s = 300 + 0.2 * out["workload"]["pods"]
        if (cluster_dir / "kueue.json").exists():
            hack(cluster_dir, "addon", "kueue", "down")  # a reused cluster's Kueue would watch every half
        if "plain" in args.only:
            if (cluster_dir / "kubegang.json").exists():
                hack(cluster_dir, "kubegang", "down")  # the baseline runs without the extender
            ns = f"bench-plain-{stamp}"
            print("[bench] baseline: plain pods, kube-scheduler alone", file=sys.stderr)
            out["plain"] = gangs.observe(target.api, ns, jobs, capacity, domains,
                                         lambda: harness.run_plain(target, jobs, ns, settings))
            out["plain"]["cleanup_s"] = harness.cleanup(target, ns, gpujobs=False, timeout=cleanup_s)
        if "kueue" in args.only:
            if (cluster_dir / "kubegang.json").exists():
                hack(cluster_dir, "kubegang", "down")  # Kueue runs with kube-scheduler's default profile
            print("[bench] kueue: hack/cluster addon kueue up", file=sys.stderr)
            out["kueue_up_s"] = hack(cluster_dir, "addon", "kueue", "up")
            ns = f"bench-kueue-{stamp}"
            try:
                print("[bench] kueue: batch Job burst", file=sys.stderr)
                out["kueue"] = gangs.observe(target.api, ns, jobs, capacity, domains,
                                             lambda: kueue.run_kueue(target, jobs, ns, settings, leaves))
                out["kueue"]["cleanup_s"] = kueue.cleanup(target, ns, leaves, timeout=cleanup_s)
            finally:
                # Its informers watch every pod: it must not cost the kubegang half anything.
                hack(cluster_dir, "addon", "kueue", "down")
        if "kubegang" in args.only:
            print("[bench] kubegang: hack/cluster kubegang up", file=sys.stderr)
            out["kubegang_up_s"] = hack(cluster_dir, "kubegang", "up", "--operators", str(args.operators))
            check_code_unchanged(out, "kubegang")
            if args.idle > 0:
                out["kubegang_idle"] = harness.idle(target, args.idle)
            out["gc_settle_s"] = harness.settle_garbage_collector(target)
            ns = f"bench-kubegang-{stamp}"
            print("[bench] kubegang: GPUJob burst", file=sys.stderr)
            out["kubegang"] = gangs.observe(target.api, ns, jobs, capacity, domains,
                                            lambda: harness.run_kubegang(target, jobs, ns, settings, leaves))
            out["kubegang"]["cleanup_s"] = harness.cleanup(target, ns, gpujobs=True, timeout=cleanup_s)
            harness.delete_queues(target, leaves)
    except (RuntimeError, TimeoutError, OSError, ValueError, httpx.HTTPError) as exc:
        out["errors"].append(f"{type(exc).__name__}: {exc}")
        print(f"[bench] ERROR: {exc}", file=sys.stderr)
    finally:
        if started_here and not args.keep:
            try:
                hack(cluster_dir, "down")
            except RuntimeError as exc:
                out["errors"].append(str(exc))
    out["summary"] = report.summary(out)
    args.results.write_text(json.dumps(out, indent=2) + "\n")
    args.doc.write_text(report.markdown(out))
    print(report.three_way_table(out))
    print(f"[bench] wrote {args.results} and {args.doc}", file=sys.stderr)
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
