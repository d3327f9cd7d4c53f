"""The ``kubectl-gang`` entry point: ``kubectl gang <command>`` (kubectl finds it on PATH).

Thin on purpose: parse the arguments, read the cluster (or a snapshot file), build the engine, print
the command's report. Each command is a module of its own (``_why``, ``_queues``, ``_nodes``,
``_whatif``); every decision is the engine's (``_engine``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from pathlib import Path

from kubegang.api import job_name_of
from kubegang.kubectl._engine import Engine
from kubegang.kubectl._kube import ClusterError, JobNotFound, client, fetch_extender_snapshot, read_cluster, read_job
from kubegang.kubectl._nodes import nodes_lines, nodes_report
from kubegang.kubectl._objects import ClusterObjects, SnapshotFileError
from kubegang.kubectl._queues import queues_lines, queues_report
from kubegang.kubectl._render import Output, Style, emit
from kubegang.kubectl._whatif import ManifestError, read_manifest, what_if_report
from kubegang.kubectl._why import why_lines, why_report

DESCRIPTION = """\
kubectl gang: why is my GPUJob pending, where is it in the queue, what if I submit this.

Answers come from kubegang's own engine (the operator's quota tree and admission cycle, the
extender's placement ledger) rebuilt from what your kubeconfig lets you read; jobs of namespaces
you cannot list are counted, never named.

examples:
  kubectl gang why pretrain -n team-a
  kubectl gang queues
  kubectl gang nodes
  kubectl gang what-if -f job.yaml -n team-a
  kubectl gang snapshot save cluster.json
  kubectl gang replay cluster.json -f job.yaml
"""


def _output(text: str) -> Output:
    try:
        return Output(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"unknown output format {text!r}; allowed: "
                                         f"{', '.join(o.value for o in Output)}") from None


def _job_reference(text: str) -> str:
    try:
        return job_name_of(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=None,
                        help="namespace of the job (default: the kubeconfig context's namespace)")
    common.add_argument("-o", "--output", type=_output, default=Output.TEXT,
                        help="output format: text (default), json, yaml")
    common.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    common.add_argument("--context", default=None, help="kubeconfig context (default: the current context)")
    parser = argparse.ArgumentParser(prog="kubectl gang", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    p = sub.add_parser("why", parents=[common], help="why a GPUJob is not running, its position, what would change it")
    p.add_argument("job", type=_job_reference, help="name of the GPUJob, or raycluster/NAME, podgroup/NAME or "
                   "schedulinggroup/NAME for the GPUJob that represents a RayCluster, pod group or native PodGroup")
    p.set_defaults(func=_cmd_why)
    p = sub.add_parser("queues", parents=[common], help="the GPUQueue tree: nominal, usage, borrowed, lent, "
                       "pending, admitted, fair share per flavour")
    p.set_defaults(func=_cmd_queues)
    for name in ("nodes", "topology"):
        p = sub.add_parser(name, parents=[common], help="free GPUs per domain and level, the largest gang per "
                           "level, a picture of the fabric")
        p.add_argument("--no-picture", action="store_true", help="leave out the per-node picture of the fabric")
        p.set_defaults(func=_cmd_nodes)
    p = sub.add_parser("what-if", parents=[common], help="would this GPUJob start now, where, whom would it "
                       "preempt (creates nothing)")
    p.add_argument("-f", "--filename", required=True, type=Path, help="file holding one GPUJob manifest")
    p.set_defaults(func=_cmd_what_if)
    p = sub.add_parser("snapshot", help="save what the engine reads, for replay")
    snap = p.add_subparsers(dest="snapshot_cmd", required=True, metavar="ACTION")
    s = snap.add_parser("save", parents=[common], help="save the API objects (and the extender's /debug/snapshot)")
    s.add_argument("file", type=Path, help="where to write the snapshot (JSON)")
    s.add_argument("--extender", default=None,
                   help="extender HTTPS URL (mTLS) to include its /debug/snapshot, e.g. https://127.0.0.1:8443")
    s.add_argument("--tls-dir", type=Path, default=None,
                   help="folder with ca.crt and client.crt/client.key (or tls.crt/tls.key, as the chart's "
                        "client Secret holds them) for --extender")
    s.add_argument("--tls-server-name", default=None,
                   help="the name the extender's certificate carries (its Service's DNS name), when --extender "
                        "reaches it by another (kubectl port-forward to 127.0.0.1)")
    s.add_argument("--token-file", type=Path, default=None,
                   help="bearer token for --extender, whose user RBAC allows get on /debug/snapshot "
                        "(needed when the extender checks callers, the chart's default)")
    s.set_defaults(func=_cmd_snapshot_save)
    p = sub.add_parser("replay", parents=[common], help="answer what-if (or why) offline against a saved snapshot")
    p.add_argument("snapshot", type=Path, help="file written by `kubectl gang snapshot save`")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("-f", "--filename", type=Path, help="file holding one GPUJob manifest (what-if)")
    group.add_argument("--why", metavar="JOB", default=None, type=_job_reference,
                       help="name of a GPUJob in the snapshot, or raycluster/NAME, podgroup/NAME or "
                            "schedulinggroup/NAME (why)")
    p.set_defaults(func=_cmd_replay)
    return parser


def _live(args: argparse.Namespace) -> tuple[ClusterObjects, str]:
    kube, default_ns = client(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    return read_cluster(kube, namespace, source=args.context or "current context"), namespace


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _why_for(engine: Engine, namespace: str, name: str, args: argparse.Namespace) -> int:
    job = engine.find(namespace, name)
    if job is None:
        key = f"{namespace}/{name}"
        print(f"kubectl gang: GPUJob {key}: {engine.invalid.get(key, 'not found')}", file=sys.stderr)
        return 1
    report = why_report(engine, job, _now())
    emit(report, why_lines(report, Style(sys.stdout)), args.output)
    return 0


def _cmd_why(args: argparse.Namespace) -> int:
    kube, default_ns = client(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    objects = read_cluster(kube, namespace)
    if not any((j.get("metadata") or {}).get("name") == args.job and j["metadata"].get("namespace") == namespace
               for j in objects.jobs):
        objects.jobs.append(read_job(kube, namespace, args.job))  # may get it where listing was refused
    return _why_for(Engine(objects), namespace, args.job, args)


def _cmd_queues(args: argparse.Namespace) -> int:
    objects, _ = _live(args)
    report = queues_report(Engine(objects))
    emit(report, queues_lines(report, Style(sys.stdout)), args.output)
    return 0


def _cmd_nodes(args: argparse.Namespace) -> int:
    objects, _ = _live(args)
    report = nodes_report(Engine(objects))
    emit(report, nodes_lines(report, Style(sys.stdout), picture_too=not args.no_picture), args.output)
    return 0


def _what_if(objects: ClusterObjects, args: argparse.Namespace, namespace: str) -> int:
    manifest = read_manifest(args.filename)
    report = what_if_report(Engine(objects), manifest, namespace, _now())
    emit(report, why_lines(report, Style(sys.stdout)), args.output)
    return 0


def _cmd_what_if(args: argparse.Namespace) -> int:
    objects, namespace = _live(args)
    return _what_if(objects, args, namespace)


def _cmd_snapshot_save(args: argparse.Namespace) -> int:
    objects, _ = _live(args)
    if args.extender:
        if args.tls_dir is None:
            raise ClusterError("--extender needs --tls-dir (ca.crt, client.crt, client.key)")
        objects.extender = fetch_extender_snapshot(args.extender, args.tls_dir, token_file=args.token_file,
                                                   server_name=args.tls_server_name)
    objects.save(args.file)
    print(f"saved {len(objects.jobs)} GPUJobs, {len(objects.queues)} GPUQueues, {len(objects.nodes)} nodes, "
          f"{len(objects.pods)} pods{' and the extender snapshot' if objects.extender else ''} to {args.file}")
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    objects = ClusterObjects.load(args.snapshot)
    namespace = args.namespace or "default"
    if args.why:
        return _why_for(Engine(objects), namespace, args.why, args)
    return _what_if(objects, args, namespace)


def main(argv: list[str] | None = None) -> int:
    """``kubectl gang``; exit 0 when answered, 1 when the job is not found, 2 on bad input or no cluster."""
    logging.basicConfig(level=logging.ERROR, format="kubectl gang: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except JobNotFound as exc:
        print(f"kubectl gang: {exc}", file=sys.stderr)
        return 1
    except (ClusterError, SnapshotFileError, ManifestError) as exc:
        print(f"kubectl gang: {exc}", file=sys.stderr)
        return 2
