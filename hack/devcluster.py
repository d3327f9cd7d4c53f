"""The local control plane: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.

Why a script of our own instead of kind or kwokctl: no container images can be pulled here, and
kwokctl's binary runtime downloads release binaries. Everything here runs the binaries that
``hack/build-control-plane.sh`` built from the Go module proxy, as plain processes on loopback.

State lives in one folder (``.cluster/`` unless KUBEGANG_CLUSTER_DIR says otherwise): certificates,
etcd data, logs, one pid file per process, the admin kubeconfig and ``state.json`` with the ports.
Processes are stopped by the pid recorded at start, never by name, so two clusters (or anything
else on the machine) are never touched by mistake.

Usage: hack/cluster up [--shape FILE ...] | down | status | env | nodes FILE ... | delete-nodes
       hack/cluster kubegang up [--operators N] [--metrics-auth on|off] | kubegang down
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

HACK = Path(__file__).resolve().parent
REPO = HACK.parent
sys.path.insert(0, str(REPO))

from kubegang.shapes import FAKE_NODE_LABEL, load_shape, node_manifest  # noqa: E402
from kubegang.testing import free_port  # noqa: E402
from kubegang.tls import KeyPair  # noqa: E402

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
CONTROLLERS = ",".join([
    "garbage-collector-controller", "namespace-controller", "deployment-controller",
    "replicaset-controller", "serviceaccount-controller", "serviceaccount-token-controller",
    "daemonset-controller", "job-controller", "endpointslice-controller", "disruption-controller",
    "ttl-after-finished-controller", "statefulset-controller",
    # Removes the not-ready taint that admission puts on every new node once kwok reports Ready.
    "node-lifecycle-controller",
    # Fills the built-in edit/admin/view roles from the chart's aggregated user roles, as in any cluster.
    "clusterrole-aggregation-controller",
    # Removes the finalizer admission puts on every PodGroup once no live pod names it (else a
    # namespace with a PodGroup never finishes deleting).
    "podgroup-protection-controller",
])
WORKLOAD_GATE = "--feature-gates=GenericWorkload=true"
"""Kubernetes' own Workload/PodGroup API (alpha in 1.36, off by default) and ``spec.schedulingGroup`` on
pods, so that kubegang can admit native pod groups (docs/ray-and-pod-groups.md). On the API server (which
serves the API and keeps the pod field) and the controller manager (PodGroup protection) only: not on
kube-scheduler, whose own GangScheduling plugin stays off, since kubegang is the gang scheduler here
(docs/decisions.md, "Native PodGroups")."""
WORKLOAD_API = "--runtime-config=scheduling.k8s.io/v1alpha2=true"


def log(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class ClusterError(RuntimeError):
    """The control plane could not be started or reached; the message says which part and why."""


def read_versions() -> dict[str, str]:
    out = {}
    for line in (HACK / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def cache_dir() -> Path:
    base = os.environ.get("KUBEGANG_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kubegang"
    return Path(base)


def binary(name: str) -> Path:
    v = read_versions()
    folder = {
        "etcd": f"etcd-{v['ETCD_VERSION']}", "kwok": f"kwok-{v['KWOK_VERSION']}",
        "helm": f"helm-{v['HELM_VERSION']}",
    }.get(name, f"kubernetes-{v['KUBERNETES_VERSION']}")
    path = cache_dir() / folder / "bin" / name
    if not path.exists():
        raise ClusterError(f"{path} is missing: run hack/build-control-plane.sh first")
    return path


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"


def cluster_paths() -> Paths:
    return Paths(Path(os.environ.get("KUBEGANG_CLUSTER_DIR") or REPO / ".cluster").resolve())


# --- certificates --------------------------------------------------------------------------------

def make_pki(pki: Path) -> None:
    """Cluster CA, apiserver serving cert, one client cert per component, service-account keys."""
    from kubegang.tls import make_ca, make_leaf

    pki.mkdir(parents=True, exist_ok=True)
    ca = make_ca("kubegang-dev-cluster-ca")

    def write(name: str, pair: KeyPair) -> None:
        (pki / f"{name}.crt").write_bytes(pair.cert_pem)
        (pki / f"{name}.key").write_bytes(pair.key_pem)
        (pki / f"{name}.key").chmod(0o600)

    write("ca", ca)
    write("apiserver", make_leaf(ca, "kube-apiserver", server_names=[
        "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.96.0.1"]))
    for user, cn, org in (("admin", "kubernetes-admin", "system:masters"),
                          ("controller-manager", "system:kube-controller-manager", None),
                          ("scheduler", "system:kube-scheduler", None),
                          ("kwok", "kwok-controller", "system:masters")):
        write(user, make_leaf(ca, cn, client=True, organization=org))
    # Service-account tokens are signed with RSA, as kube-apiserver's defaults expect.
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(sa.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    (pki / "sa.key").chmod(0o600)
    (pki / "sa.pub").write_bytes(sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kubegang-dev",
        "clusters": [{"name": "kubegang-dev", "cluster": {
            "server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {
            "client-certificate": str(pki / f"{user}.crt"), "client-key": str(pki / f"{user}.key")}}],
        "contexts": [{"name": "kubegang-dev", "context": {"cluster": "kubegang-dev", "user": user}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


# --- processes -----------------------------------------------------------------------------------

def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by us) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def start(paths: Paths, name: str, argv: list[str], env: dict[str, str] | None = None, *,
          restart: bool = False) -> int:
    """Start ``argv`` detached; ``restart``: under ``hack/supervise.py``, which starts it again when it
    exits, as the kubelet does for the control plane's static pods. ``<name>.pid`` is the process
    itself either way (what tests signal); the supervisor's is ``<name>.supervisor.pid``."""
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.pids.mkdir(parents=True, exist_ok=True)
    logf = (paths.logs / f"{name}.log").open("ab")
    pid_file = paths.pids / f"{name}.pid"
    pid_file.unlink(missing_ok=True)
    command = [sys.executable, str(HACK / "supervise.py"), str(pid_file), "--", *argv] if restart else argv
    proc = subprocess.Popen(command, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=paths.root, env={**os.environ, **(env or {})})
    if restart:
        (paths.pids / f"{name}.supervisor.pid").write_text(str(proc.pid))
        deadline = time.monotonic() + 10
        while recorded_pid(paths, name) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        pid_file.write_text(str(proc.pid))
    pid = recorded_pid(paths, name) or proc.pid
    log(f"started {name} (pid {pid}{', restarted on exit' if restart else ''}), log {paths.logs / (name + '.log')}")
    return pid


def recorded_pid(paths: Paths, name: str) -> int | None:
    try:
        return int((paths.pids / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def stop(paths: Paths, name: str, timeout: float = 10.0) -> None:
    supervisor = recorded_pid(paths, f"{name}.supervisor")
    if supervisor is not None:
        # The supervisor stops its process and does not restart it.
        if pid_alive(supervisor):
            os.kill(supervisor, signal.SIGTERM)
            deadline = time.monotonic() + timeout + 2
            while pid_alive(supervisor) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(supervisor):
                os.killpg(supervisor, signal.SIGKILL)
        (paths.pids / f"{name}.supervisor.pid").unlink(missing_ok=True)
    pid = recorded_pid(paths, name)
    if pid is None:
        return
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        log(f"stopped {name} (pid {pid})")
    (paths.pids / f"{name}.pid").unlink(missing_ok=True)


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_for(paths: Paths, name: str, check: Any, timeout: float) -> None:
    """Wait until check() is true; fail with the component's log if it dies or times out."""
    deadline = time.monotonic() + timeout
    pid = recorded_pid(paths, name)
    while time.monotonic() < deadline:
        if pid is not None and not pid_alive(pid):
            raise ClusterError(f"{name} exited during start-up; last log lines:\n"
                               f"{tail(paths.logs / (name + '.log'))}")
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise ClusterError(f"{name} not ready after {timeout:.0f}s; last log lines:\n"
                       f"{tail(paths.logs / (name + '.log'))}")


def https_ok(url: str, pki: Path, user: str = "admin") -> bool:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / f"{user}.crt"), str(pki / f"{user}.key"))
    with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
        return bool(resp.status == 200)


def insecure_healthz(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=2) as resp:
        return bool(resp.status == 200)


def kubectl(paths: Paths, *args: str, input_text: str | None = None, check: bool = True) -> str:
    proc = subprocess.run([str(binary("kubectl")), "--kubeconfig", str(paths.kubeconfig), *args],
                          input=input_text, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


# --- the control plane ---------------------------------------------------------------------------

def scheduler_config(paths: Paths, extender: dict[str, Any] | None) -> dict[str, Any]:
    profiles: list[dict[str, Any]] = [{"schedulerName": "default-scheduler"}]
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(paths.root / "scheduler.kubeconfig"), "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False},
        "profiles": profiles,
    }
    if extender:
        config["profiles"] = [*profiles, *extender["profiles"]]
        config["extenders"] = extender["extenders"]
    return config


def up(paths: Paths, shapes: list[str], timeout: float) -> None:
    if status(paths, quiet=True):
        log(f"cluster already running in {paths.root}")
        for shape in shapes:
            apply_nodes(paths, shape)
        return
    down(paths, quiet=True)
    for name in COMPONENTS:
        binary("etcd" if name == "etcd" else "kwok" if name == "kwok" else name)
    t0 = time.monotonic()
    paths.root.mkdir(parents=True, exist_ok=True)
    if not (paths.pki / "sa.key").exists():
        make_pki(paths.pki)
    ports = {"etcd": free_port(), "etcd-peer": free_port(), "apiserver": free_port(),
             "controller-manager": free_port(), "scheduler": free_port(), "kwok": free_port()}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    write_kubeconfig(paths.kubeconfig, server, paths.pki, "admin")
    for user in ("controller-manager", "scheduler", "kwok"):
        write_kubeconfig(paths.root / f"{user}.kubeconfig", server, paths.pki, user)
    state = {"ports": ports, "server": server, "kubeconfig": str(paths.kubeconfig), "started": time.time()}
    paths.state.write_text(json.dumps(state, indent=2))
    pki = paths.pki

    start(paths, "etcd", [
        str(binary("etcd")), "--name", "kubegang-dev", "--data-dir", str(paths.root / "etcd-data"),
        "--listen-client-urls", f"http://127.0.0.1:{ports['etcd']}",
        "--advertise-client-urls", f"http://127.0.0.1:{ports['etcd']}",
        "--listen-peer-urls", f"http://127.0.0.1:{ports['etcd-peer']}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{ports['etcd-peer']}",
        "--initial-cluster", f"kubegang-dev=http://127.0.0.1:{ports['etcd-peer']}",
        # A throwaway test cluster: durability costs fsyncs we do not need.
        "--unsafe-no-fsync", "--quota-backend-bytes", str(4 << 30), "--log-level", "warn",
    ], restart=True)
    wait_for(paths, "etcd", lambda: urllib.request.urlopen(
        f"http://127.0.0.1:{ports['etcd']}/health", timeout=2).status == 200, 30)

    start(paths, "kube-apiserver", [
        str(binary("kube-apiserver")), f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={ports['apiserver']}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
        "--allow-privileged=true", "--endpoint-reconciler-type=none",
        # /debug/pprof for a benchmark that asks (bench.e2e.run --profile): where the API server's CPU goes.
        f"--profiling={'true' if os.environ.get('KUBEGANG_APISERVER_PROFILING') == '1' else 'false'}",
        "--max-requests-inflight=3000", "--max-mutating-requests-inflight=1500",
        "--enable-priority-and-fairness=false", "--watch-cache=true", WORKLOAD_GATE, WORKLOAD_API, "--v=1",
    ], restart=True)
    wait_for(paths, "kube-apiserver", lambda: https_ok(f"{server}/readyz", pki), 90)

    start(paths, "kube-controller-manager", [
        str(binary("kube-controller-manager")), f"--kubeconfig={paths.root / 'controller-manager.kubeconfig'}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['controller-manager']}",
        f"--controllers={CONTROLLERS}", "--leader-elect=false",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=true", "--kube-api-qps=300", "--kube-api-burst=600",
        "--concurrent-gc-syncs=20", WORKLOAD_GATE, "--v=1",
        # Fake nodes on a shared 2-core machine: kwok's Lease renewals run late when a burst saturates
        # the API server, and after 50 s (the default) kube-controller-manager marks the nodes and
        # their pods NotReady, taints them, and every controller then works through that churn (a
        # full-size kubegang half saw 456 to 4,552 such node writes from one run to the next, the
        # plain half none). A real kubelet's heartbeats do not queue behind the burst; nothing here
        # waits for a fake node to fail.
        "--node-monitor-grace-period=180s",
    ], restart=True)
    write_scheduler_config(paths, None)
    start_scheduler(paths)
    start(paths, "kwok", [
        str(binary("kwok")), f"--kubeconfig={paths.root / 'kwok.kubeconfig'}",
        f"--manage-nodes-with-label-selector={FAKE_NODE_LABEL[0]}={FAKE_NODE_LABEL[1]}",
        "--cidr=10.0.0.0/14", "--node-ip=10.255.255.1", "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{ports['kwok']}",
        *[f"--config={p}" for p in stage_files(paths)],
    ], restart=True)
    wait_for(paths, "kube-controller-manager", lambda: insecure_healthz(ports["controller-manager"]), 60)
    wait_for(paths, "kube-scheduler", lambda: insecure_healthz(ports["scheduler"]), 60)
    # The default service account is what every pod needs before it can be created.
    wait_for(paths, "kube-controller-manager",
             lambda: kubectl(paths, "get", "serviceaccount", "default", "-n", "default", check=False) != "", 60)
    log(f"control plane ready in {time.monotonic() - t0:.1f}s ({server})")
    for shape in shapes:
        apply_nodes(paths, shape)


NEVER_START_ANNOTATION = "kubegang.io/fake-never-start"
"""A pod with this annotation is bound and never started: kwok's pod-ready stage skips it, as a
kubelet that cannot pull its image would leave it Pending (see tests of ``gangTimeoutSeconds``)."""


def stage_files(paths: Paths) -> list[Path]:
    stages = binary("kwok").parent.parent / "stages"
    files = sorted(stages.glob("*.yaml"))
    if not files:
        raise ClusterError(f"kwok stage definitions missing in {stages}: run hack/build-control-plane.sh")
    return [*(_never_start_variant(paths, f) if f.name == "pod-ready.yaml" else f for f in files),
            HACK / "kwok" / "kubegang-stages.yaml"]


def _never_start_variant(paths: Paths, pod_ready: Path) -> Path:
    """kwok's own pod-ready stage, unchanged but for one more selector: the pod lacks NEVER_START_ANNOTATION."""
    stage = yaml.safe_load(pod_ready.read_text())
    stage["spec"]["selector"]["matchExpressions"].append(
        {"key": f'.metadata.annotations["{NEVER_START_ANNOTATION}"]', "operator": "DoesNotExist"})
    out = paths.root / "kwok-pod-ready.yaml"
    out.write_text(yaml.safe_dump(stage, sort_keys=False))
    return out


def write_scheduler_config(paths: Paths, extender: dict[str, Any] | None) -> None:
    (paths.root / "scheduler-config.yaml").write_text(yaml.safe_dump(scheduler_config(paths, extender)))


def start_scheduler(paths: Paths) -> None:
    ports = json.loads(paths.state.read_text())["ports"]
    start(paths, "kube-scheduler", [
        str(binary("kube-scheduler")), f"--config={paths.root / 'scheduler-config.yaml'}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['scheduler']}", "--v=1",
    ], restart=True)


def restart_scheduler(paths: Paths, extender_config: Path | None) -> None:
    """Restart kube-scheduler with (or without) the kubegang profile and its extender."""
    extender = yaml.safe_load(extender_config.read_text()) if extender_config else None
    write_scheduler_config(paths, extender)
    stop(paths, "kube-scheduler")
    start_scheduler(paths)
    ports = json.loads(paths.state.read_text())["ports"]
    wait_for(paths, "kube-scheduler", lambda: insecure_healthz(ports["scheduler"]), 60)


def apply_nodes(paths: Paths, shape_file: str) -> None:
    shape = load_shape(shape_file)
    t0 = time.monotonic()
    nodes = [node_manifest(name, group) for name, group in shape.nodes()]
    names = {n["metadata"]["name"] for n in nodes}
    existing = set(kubectl(paths, "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").split())
    missing = [n for n in nodes if n["metadata"]["name"] not in existing]
    # Node status (capacity) is only taken on create; kwok then keeps it Ready. Nodes that already
    # exist are left as they are, so adding a shape twice is harmless.
    if missing:
        kubectl(paths, "create", "-f", "-",
                input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": missing}))
    def all_ready() -> bool:
        out = json.loads(kubectl(paths, "get", "nodes", "-l", "=".join(FAKE_NODE_LABEL), "-o", "json"))
        # Ready, and the not-ready taint that admission added on create is gone again.
        ready = {n["metadata"]["name"] for n in out["items"]
                 if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
                 and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", []))}
        return names <= ready
    wait_for(paths, "kwok", all_ready, 120 + len(nodes) / 10)
    log(f"{len(nodes)} fake nodes of shape {shape.name} ready ({shape.gpu_count} GPUs) in "
        f"{time.monotonic() - t0:.1f}s")


def delete_nodes(paths: Paths) -> None:
    kubectl(paths, "delete", "nodes", "-l", "=".join(FAKE_NODE_LABEL), "--wait=true")


def down(paths: Paths, quiet: bool = False) -> None:
    for name in reversed(COMPONENTS):
        stop(paths, name)
    for extra in paths.pids.glob("*.pid") if paths.pids.exists() else []:
        stop(paths, extra.stem)
    if paths.root.exists():
        subprocess.run(["rm", "-rf", str(paths.root / "etcd-data")], check=False)
        paths.state.unlink(missing_ok=True)
    if not quiet:
        log("cluster stopped")


def status(paths: Paths, quiet: bool = False) -> bool:
    if not paths.state.exists():
        if not quiet:
            print("down")
        return False
    ok = True
    for name in COMPONENTS:
        pid = recorded_pid(paths, name)
        alive = pid is not None and pid_alive(pid)
        ok &= alive
        if not quiet:
            print(f"{name:25s} {'running' if alive else 'STOPPED'} (pid {pid})")
    if ok:
        try:
            ok = https_ok(json.loads(paths.state.read_text())["server"] + "/readyz", paths.pki)
        except Exception:
            ok = False
    if not quiet:
        print("ready" if ok else "not ready")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the control plane (reuses a running one) and create fake nodes")
    p_up.add_argument("--shape", action="append", default=[], help="cluster shape file (repeatable)")
    p_up.add_argument("--timeout", type=float, default=180)
    sub.add_parser("down", help="stop every process this cluster started (by pid)")
    sub.add_parser("status", help="print each component's state; exit 1 unless ready")
    sub.add_parser("env", help="print the export line for KUBECONFIG")
    p_nodes = sub.add_parser("nodes", help="create the fake nodes of a shape")
    p_nodes.add_argument("shape")
    sub.add_parser("delete-nodes", help="delete every fake node")
    p_sched = sub.add_parser("scheduler", help="restart kube-scheduler with an extender configuration")
    p_sched.add_argument("--extender-config", type=Path, default=None,
                         help="YAML with 'profiles' and 'extenders' to add; omit for the default scheduler only")
    p_kg = sub.add_parser("kubegang", help="run kubegang (CRDs, extender, agent, operators) on the cluster")
    p_kg.add_argument("action", choices=["up", "down"])
    p_kg.add_argument("--operators", type=int, default=2, help="operator replicas (leader election)")
    p_kg.add_argument("--metrics-auth", choices=["on", "off"], default="off",
                      help="on: /metrics over HTTPS behind token checks, as the chart runs it, with a scraper token "
                           "in kubegang.json; off (default): plain HTTP on loopback")
    args = parser.parse_args(argv)
    paths = cluster_paths()
    try:
        if args.cmd == "up":
            up(paths, args.shape, args.timeout)
        elif args.cmd == "down":
            down(paths)
        elif args.cmd == "status":
            return 0 if status(paths) else 1
        elif args.cmd == "env":
            print(f"export KUBECONFIG={paths.kubeconfig}")
        elif args.cmd == "nodes":
            apply_nodes(paths, args.shape)
        elif args.cmd == "delete-nodes":
            delete_nodes(paths)
        elif args.cmd == "scheduler":
            restart_scheduler(paths, args.extender_config)
        elif args.cmd == "kubegang":
            import localstack
            if args.action == "up":
                localstack.up(paths, args.operators, args.metrics_auth)
            else:
                localstack.down(paths)
    except (ClusterError, OSError, ValueError) as exc:
        log(f"ERROR: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
