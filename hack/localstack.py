"""kubegang itself on the local control plane: CRDs, extender, agents (replay), operators.

The three processes run as local Python processes against the cluster that ``devcluster.py``
started, exactly as the Helm chart would run them in pods, but without images (none can be built
or pulled here). kube-scheduler is restarted with the kubegang profile and the extender, rendered
from the one scheduler configuration template (``config/scheduler``) the chart uses too. The chart's
GPU routing policy (``templates/gpu-routing.yaml``, rendered by helm) is applied as well, so GPU pods
that name no scheduler go to kubegang here exactly as on a cluster installed with Helm.

Each process gets its own pid file in the cluster folder, so ``hack/cluster down`` stops them with
the rest; ``hack/cluster kubegang down`` stops only these.

Metrics: ``--metrics-auth on`` runs every process as the chart does by default (``/metrics`` over HTTPS
with a certificate from the stack's CA, readable only with a token RBAC allows; ``kubegang.authn``) and
makes the scraper a real one can use: ServiceAccount ``kubegang-metrics-reader`` bound to the chart's
own ``-metrics-reader`` ClusterRole (``templates/rbac-metrics.yaml``), its token from ``kubectl create
token`` written to ``kubegang-metrics-token``, and the CA to trust, all named in ``kubegang.json``.
The default is ``off`` (plain HTTP on loopback, the opt-out for local runs), which the tests that read
a process's metrics directly rely on.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import devcluster as dc
import yaml

from kubegang.shapes import FAKE_NODE_LABEL
from kubegang.testing import free_port
from kubegang.tls import PemPaths

REPO = dc.REPO
NAMESPACE = "kubegang-system"
REPLAY_DIR = REPO / "tests" / "fixtures" / "nvml"
# The chart's GPU routing policy, rendered for a release named like this stack (objects kubegang-*).
ROUTING_RELEASE = "kubegang"
ROUTING_TEMPLATE = "templates/gpu-routing.yaml"
METRICS_RBAC_TEMPLATE = "templates/rbac-metrics.yaml"
METRICS_READER = "kubegang-metrics-reader"
"""The ServiceAccount a scraper of the local stack uses (``--metrics-auth on``)."""


@dataclass(frozen=True)
class StackPorts:
    extender_https: int
    extender_grpc: int
    extender_metrics: int
    agent_metrics: int
    operator_metrics: tuple[int, ...]
    operator_health: tuple[int, ...] = ()


def python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def http_ok(url: str, ca: Path | None = None, token: str | None = None) -> bool:
    """GET ``url`` answers 200; HTTPS trusting ``ca``, with a bearer ``token`` when given."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    with urllib.request.urlopen(request, timeout=2, context=context) as resp:
        return bool(resp.status == 200)


def stack_state(paths: dc.Paths) -> dict[str, object]:
    path = paths.root / "kubegang.json"
    return json.loads(path.read_text()) if path.exists() else {}


def up(paths: dc.Paths, operators: int = 2, metrics_auth: str = "off") -> StackPorts:
    """Start everything; if any part fails, stop what was started and re-raise."""
    if metrics_auth not in ("on", "off"):
        raise ValueError(f"--metrics-auth: expected on or off, got {metrics_auth!r}")
    try:
        return _up(paths, operators, metrics_auth == "on")
    except BaseException:
        down(paths, quiet=True)
        raise


def _metrics_serving(paths: dc.Paths, pki: PemPaths, auth: bool) -> tuple[list[str], dict[str, str]]:
    """The processes' metrics flags, and what a scraper needs (``kubegang.json``'s ``metrics``)."""
    if not auth:
        return ["--metrics-auth", "off"], {"auth": "off", "scheme": "http"}
    from kubegang.tls import DEFAULT_SERVER_NAMES, KeyPair, make_leaf

    ca = KeyPair(pki.ca_cert.read_bytes(), pki.ca_key.read_bytes())
    leaf = make_leaf(ca, "kubegang-metrics", server_names=DEFAULT_SERVER_NAMES)
    cert, key = pki.ca_cert.parent / "metrics.crt", pki.ca_cert.parent / "metrics.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    key.chmod(0o600)
    dc.kubectl(paths, "apply", "--server-side", "--force-conflicts", "-f", "-", input_text=metrics_rbac_manifest())
    if dc.kubectl(paths, "get", "serviceaccount", METRICS_READER, "-n", NAMESPACE, check=False) == "":
        dc.kubectl(paths, "create", "serviceaccount", METRICS_READER, "-n", NAMESPACE)
    token_file = paths.root / "kubegang-metrics-token"
    token_file.write_text(dc.kubectl(paths, "create", "token", METRICS_READER, "-n", NAMESPACE,
                                     "--duration=48h").strip())
    token_file.chmod(0o600)
    flags = ["--metrics-auth", "on", "--metrics-tls-cert", str(cert), "--metrics-tls-key", str(key)]
    return flags, {"auth": "on", "scheme": "https", "ca": str(pki.ca_cert), "token_file": str(token_file)}


def metrics_rbac_manifest() -> str:
    """The chart's metrics RBAC, its reader ClusterRole bound to the local scraper's ServiceAccount."""
    reader = json.dumps([{"kind": "ServiceAccount", "name": METRICS_READER, "namespace": NAMESPACE}])
    proc = subprocess.run([str(dc.binary("helm")), "template", ROUTING_RELEASE, str(REPO / "charts" / "kubegang"),
                           "--namespace", NAMESPACE, "--show-only", METRICS_RBAC_TEMPLATE,
                           "--set-json", f"metricsAuth.readers={reader}"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise dc.ClusterError(f"helm template --show-only {METRICS_RBAC_TEMPLATE} failed: {proc.stderr.strip()}")
    return proc.stdout


def _up(paths: dc.Paths, operators: int, metrics_auth: bool) -> StackPorts:
    from kubegang.extender.scheduler_config import SchedulerConfigValues, render_scheduler_config
    from kubegang.tls import write_pki

    if not dc.status(paths, quiet=True):
        raise dc.ClusterError("the control plane is not running: hack/cluster up first")
    down(paths, quiet=True)
    t0 = time.monotonic()
    tls = paths.root / "kubegang-pki"
    pki = write_pki(tls)
    kubeconfig = str(paths.kubeconfig)
    env = {"KUBECONFIG": kubeconfig, "PYTHONUNBUFFERED": "1"}
    ports = StackPorts(free_port(), free_port(), free_port(), free_port(),
                       tuple(free_port() for _ in range(operators)), tuple(free_port() for _ in range(operators)))

    # 1. The API: CRDs (what `helm install` would apply first) and the operator's namespace.
    dc.kubectl(paths, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    dc.kubectl(paths, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    if dc.kubectl(paths, "get", "namespace", NAMESPACE, check=False) == "":
        dc.kubectl(paths, "create", "namespace", NAMESPACE)
    serving, metrics = _metrics_serving(paths, pki, metrics_auth)
    (paths.root / "kubegang.json").write_text(json.dumps(
        {"ports": ports.__dict__, "tls_dir": str(tls), "namespace": NAMESPACE, "metrics": metrics}, indent=2))
    scheme = metrics["scheme"]
    trust = Path(metrics["ca"]) if metrics_auth else None
    token = Path(metrics["token_file"]).read_text() if metrics_auth else None

    # 2. The extender, then kube-scheduler pointed at it.
    dc.start(paths, "kubegang-extender", [
        python(), "-m", "kubegang.extender", "--kubeconfig", kubeconfig,
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key), "--client-ca", str(pki.ca_cert),
        "--https-address", "127.0.0.1", "--https-port", str(ports.extender_https),
        "--grpc-address", "127.0.0.1", "--grpc-port", str(ports.extender_grpc),
        "--health-address", "127.0.0.1", "--health-port", str(ports.extender_metrics), *serving,
    ], env=env)
    dc.wait_for(paths, "kubegang-extender",
                lambda: http_ok(f"{scheme}://127.0.0.1:{ports.extender_metrics}/readyz", trust), 60)
    rendered = yaml.safe_load(render_scheduler_config(SchedulerConfigValues(
        extender_url=f"https://127.0.0.1:{ports.extender_https}", ca_file=str(pki.ca_cert),
        cert_file=str(pki.client_cert), key_file=str(pki.client_key), kubeconfig=kubeconfig, leader_elect=False)))
    extender_config = paths.root / "kubegang-scheduler-extender.yaml"
    extender_config.write_text(yaml.safe_dump({"profiles": rendered["profiles"], "extenders": rendered["extenders"]}))
    dc.restart_scheduler(paths, extender_config)
    apply_gpu_routing(paths)

    # 3. One replay agent serves every fake node, as a DaemonSet would serve each real one.
    dc.start(paths, "kubegang-agent", [
        python(), "-m", "kubegang.agent", "--replay-dir", str(REPLAY_DIR),
        "--nodes-from-label", "=".join(FAKE_NODE_LABEL), "--metrics-host", "127.0.0.1",
        "--metrics-port", str(ports.agent_metrics), "--poll-interval", "5", *serving,
    ], env=env)

    # 4. Operators: two replicas campaign for one Lease; only the leader admits.
    for i, (port, health) in enumerate(zip(ports.operator_metrics, ports.operator_health, strict=True)):
        dc.start(paths, f"kubegang-operator-{i}", [
            python(), "-m", "kubegang.operator", "--kubeconfig", kubeconfig, "--namespace", NAMESPACE,
            "--extender-address", f"127.0.0.1:{ports.extender_grpc}", "--tls-dir", str(tls),
            "--tls-server-name", "localhost", "--metrics-port", str(port), "--health-port", str(health),
            "--listen-address", "127.0.0.1", "--identity", f"local-operator-{i}", *serving,
        ], env=env)
    # The agent is healthy after its first full pass over the nodes it serves: allow for many.
    nodes = len(dc.kubectl(paths, "get", "nodes", "-l", "=".join(FAKE_NODE_LABEL), "-o", "name").split())
    dc.wait_for(paths, "kubegang-agent",
                lambda: http_ok(f"{scheme}://127.0.0.1:{ports.agent_metrics}/healthz", trust), 60 + nodes / 5)
    for i, port in enumerate(ports.operator_metrics):
        dc.wait_for(paths, f"kubegang-operator-{i}",
                    lambda port=port: http_ok(f"{scheme}://127.0.0.1:{port}/metrics", trust, token), 60)
    for i, port in enumerate(ports.operator_health):  # liveness, answered on the event loop
        dc.wait_for(paths, f"kubegang-operator-{i}", lambda port=port: http_ok(f"http://127.0.0.1:{port}/healthz"), 60)
    dc.log(f"kubegang running in {time.monotonic() - t0:.1f}s: extender https :{ports.extender_https} "
           f"grpc :{ports.extender_grpc}, agent, {operators} operator(s), metrics auth {metrics['auth']}")
    return ports


def gpu_routing_manifest() -> str:
    """The chart's GPU routing policy and binding, as `helm install kubegang -n kubegang-system` renders them."""
    proc = subprocess.run([str(dc.binary("helm")), "template", ROUTING_RELEASE, str(REPO / "charts" / "kubegang"),
                           "--namespace", NAMESPACE, "--show-only", ROUTING_TEMPLATE],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise dc.ClusterError(f"helm template --show-only {ROUTING_TEMPLATE} failed: {proc.stderr.strip()}")
    return proc.stdout


def _routed(paths: dc.Paths) -> bool:
    """Does the API server apply the policy yet? A GPU pod created with --dry-run=server tells."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kubegang-routing-probe", "namespace": "default"},
             "spec": {"containers": [{"name": "probe", "image": "probe",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    out = dc.kubectl(paths, "create", "--dry-run=server", "-f", "-", "-o", "jsonpath={.spec.schedulerName}",
                     input_text=json.dumps(probe), check=False)
    return out == "kubegang"


def apply_gpu_routing(paths: dc.Paths) -> None:
    dc.kubectl(paths, "apply", "--server-side", "--force-conflicts", "-f", "-", input_text=gpu_routing_manifest())
    # Policies reach admission through an informer: wait until a GPU pod really is routed.
    dc.wait_for(paths, "gpu-routing policy", lambda: _routed(paths), 30)


def component_names(paths: dc.Paths) -> list[str]:
    return sorted(p.stem for p in paths.pids.glob("kubegang-*.pid")) if paths.pids.exists() else []


def down(paths: dc.Paths, quiet: bool = False) -> None:
    names = component_names(paths)
    for name in names:
        dc.stop(paths, name)
    (paths.root / "kubegang.json").unlink(missing_ok=True)
    # Without its extender the kubegang profile would hold every GPU pod (the extender is not
    # ignorable), so GPU pods are no longer routed to it and kube-scheduler goes back to the default
    # profile alone.
    if dc.status(paths, quiet=True):
        try:
            dc.kubectl(paths, "delete", "--ignore-not-found", "-f", "-", input_text=gpu_routing_manifest())
        except dc.ClusterError as exc:  # still put the scheduler back; say what is left
            dc.log(f"GPU routing policy not removed: {exc}")
        if names:
            dc.restart_scheduler(paths, None)
    if not quiet:
        dc.log("kubegang processes stopped")
