"""kubegang's neighbours on the local control plane: real Kueue and the real KubeRay operator.

Both run as local processes against the cluster that ``devcluster.py`` started (admin kubeconfig, so
their charts' RBAC is not exercised), built from the Go module proxy by ``hack/build-addons.sh``,
with the CRDs of the very module version that was built. Each has a pid file in the cluster folder,
so ``hack/cluster down`` stops it with the rest; ``hack/cluster addon NAME down`` stops only it and
removes what it added (CRDs, webhook configurations), so the cluster is as it was before ``up``.

Kueue needs its webhooks: they set ``suspend`` on a queued Job and the scheduling gate on a queued
pod, validate its own objects, and convert its CRDs between v1beta1 and v1beta2. Here they are served
on 127.0.0.1 with a certificate for 127.0.0.1 signed by the cluster's own CA (``<cluster>/pki``),
and the webhook configurations and CRD conversions point at that URL instead of a Service (there is
no Service network here). Two deliberate narrowings, both so that a Kueue that is down can never
stop pods or Jobs that are not Kueue's: only the integrations ``batch/job`` and ``pod`` are enabled
(their webhooks and Kueue's own; no JobSet, Kubeflow, Ray, Deployment or StatefulSet integration),
and those integration webhooks only see objects that carry ``kueue.x-k8s.io/queue-name``. What that
loses: ``manageJobsWithoutQueueName`` and LocalQueue defaulting (a job without the label that a
namespace's ``default`` LocalQueue would have taken) cannot work. Kueue v0.17 also reads a metrics
serving certificate from the fixed path ``/etc/kueue/metrics/certs`` when its internal certificate
management is off (and that management issues certificates only for a Service's DNS name, not for
127.0.0.1): a self-signed pair is written there once if none is (the path is the machine's, shared by
every local cluster; any valid pair serves). The visibility API server (``VisibilityOnDemand``) is
switched off: it would be a second aggregated API server to register, and nothing here uses it.

The KubeRay operator needs no webhook by default (its RayCluster webhook is opt-in via
``ENABLE_WEBHOOKS``); it gets its CRDs and runs, with ``HTTP_PROXY`` set to ``rayheads.py``, the
stand-in for the Ray heads that fake nodes do not run: KubeRay follows a RayJob through its head's
job API, so without it no RayJob could finish here.

Usage: hack/cluster addon kueue|kuberay up|down (hack/cluster builds the add-on first on ``up``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import devcluster as dc
import yaml

from kubegang.testing import free_port
from kubegang.tls import KeyPair, make_ca, make_leaf

ADDONS = ("kueue", "kuberay")
KUEUE_NAMESPACE = "kueue-system"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_FRAMEWORKS = ("batch/job", "pod")
# Webhooks kept from Kueue's manifests: its own API group, and the enabled integrations' objects.
KUEUE_WEBHOOK_RESOURCES = {("kueue.x-k8s.io", "*"), ("batch", "jobs"), ("", "pods")}
# The CRDs Kueue's kustomization gives a conversion webhook (config/components/crd/kustomization.yaml).
KUEUE_CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
KUEUE_WEBHOOK_CONFIGS = ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration")
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
KUEUE_CLIENT_QPS, KUEUE_CLIENT_BURST = 200, 400
KUEUE_CONCURRENCY = {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5, "LocalQueue.kueue.x-k8s.io": 1,
                     "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1, "ResourceFlavor.kueue.x-k8s.io": 1}
# Objects beyond the add-on's own CRDs that it puts finalizers on (Kueue's pod integration).
FINALIZED_PODS = {"kueue": "kueue.x-k8s.io/managed=true"}


@dataclass(frozen=True)
class Addon:
    """One add-on as built by hack/build-addons.sh: where its binary and manifests are cached."""

    name: str
    process: str
    version_key: str
    binary_name: str

    @property
    def folder(self) -> Path:
        return dc.cache_dir() / f"{self.name}-{dc.read_versions()[self.version_key]}"

    @property
    def version(self) -> str:
        return dc.read_versions()[self.version_key]

    @property
    def binary(self) -> Path:
        path = self.folder / "bin" / self.binary_name
        if not path.exists():
            raise dc.ClusterError(f"{path} is missing: run hack/build-addons.sh {self.name} first")
        return path

    @property
    def crd_names(self) -> list[str]:
        return [str(yaml.safe_load(f.read_text())["metadata"]["name"]) for f in self.crd_files]

    @property
    def crd_files(self) -> list[Path]:
        files = sorted((self.folder / "crds").glob("*.yaml"))
        if not files:
            raise dc.ClusterError(f"no CRDs in {self.folder / 'crds'}: run hack/build-addons.sh {self.name}")
        return files

    def state_file(self, paths: dc.Paths) -> Path:
        return paths.root / f"{self.name}.json"


KUEUE = Addon("kueue", "kueue", "KUEUE_VERSION", "kueue")
KUBERAY = Addon("kuberay", "kuberay-operator", "KUBERAY_VERSION", "ray-operator")
RAY_HEADS = "ray-heads"
"""The stand-in for the Ray heads of fake nodes (``rayheads.py``), which KubeRay reaches as its HTTP proxy."""


def addon(name: str) -> Addon:
    """The add-on called ``name``; a clear error for any other name."""
    found = {a.name: a for a in (KUEUE, KUBERAY)}.get(name)
    if found is None:
        raise ValueError(f"unknown add-on {name!r}: allowed are {', '.join(ADDONS)}")
    return found


def http_status(url: str, context: ssl.SSLContext | None = None) -> int:
    with urllib.request.urlopen(url, timeout=2, context=context) as resp:
        return int(resp.status)


def _answers(url: str) -> bool:
    """Whether anything serves HTTP at ``url`` (any status: the stand-in answers 404 off its routes)."""
    try:
        return http_status(url) > 0
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def up(paths: dc.Paths, name: str) -> dict[str, Any]:
    """Start the add-on from scratch: a running one is taken down first, CRDs and objects with it (so
    a second ``up`` is a clean restart, not a reload). On failure stop what was started, re-raise."""
    a = addon(name)
    if not dc.status(paths, quiet=True):
        raise dc.ClusterError("the control plane is not running: hack/cluster up first")
    down(paths, name, quiet=True)
    try:
        t0 = time.monotonic()
        state = _up_kueue(paths) if a is KUEUE else _up_kuberay(paths)
        state.update(version=a.version, pid=dc.recorded_pid(paths, a.process))
        a.state_file(paths).write_text(json.dumps(state, indent=2))
        dc.log(f"{a.name} {a.version} running in {time.monotonic() - t0:.1f}s (pid {state['pid']})")
        return state
    except BaseException:
        down(paths, name, quiet=True)
        raise


def down(paths: dc.Paths, name: str, quiet: bool = False) -> None:
    """Stop the add-on and remove what it added, so nothing on the cluster depends on it any more."""
    a = addon(name)
    alive = dc.status(paths, quiet=True)
    if alive and a is KUEUE:
        # First, so that no create or update waits for a webhook that is about to go away.
        dc.kubectl(paths, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                   *KUEUE_WEBHOOK_CONFIGS, "--ignore-not-found", check=False)
    dc.stop(paths, a.process)
    if a is KUBERAY:
        dc.stop(paths, RAY_HEADS)
    a.state_file(paths).unlink(missing_ok=True)
    if alive and (a.folder / "crds").is_dir():
        crds = a.crd_names
        for resource in crds:
            _strip_finalizers(paths, resource, None)
        if a.name in FINALIZED_PODS:
            _strip_finalizers(paths, "pods", FINALIZED_PODS[a.name])
        dc.kubectl(paths, "delete", "crd", "--ignore-not-found", "--wait=true", "--timeout=120s", *crds,
                   check=False)
    if not quiet:
        dc.log(f"{a.name} stopped")


def _strip_finalizers(paths: dc.Paths, resource: str, selector: str | None) -> None:
    """Remove every finalizer from the add-on's objects: with the controller gone, they would block the
    deletion of the objects, their namespaces and the CRDs forever."""
    args = ["get", resource, "-A", "-o", "json", *(["-l", selector] if selector else [])]
    out = dc.kubectl(paths, *args, check=False)
    if not out:
        return  # the CRD is not there: nothing of this kind can exist
    for item in json.loads(out)["items"]:
        meta = item["metadata"]
        if meta.get("finalizers"):
            where = ["-n", meta["namespace"]] if meta.get("namespace") else []
            dc.kubectl(paths, "patch", resource, meta["name"], *where, "--type=merge",
                       "-p", '{"metadata":{"finalizers":null}}', check=False)


def _apply_crds(paths: dc.Paths, a: Addon) -> None:
    # Server-side: Kueue's Workload CRD is far larger than the client-side apply annotation allows.
    dc.kubectl(paths, "apply", "--server-side", "--force-conflicts", "--field-manager", f"kubegang-{a.name}",
               *[arg for f in a.crd_files for arg in ("-f", str(f))])
    dc.kubectl(paths, "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}" for c in a.crd_names])
    # Established is not yet served: a CRD deleted and made again (an add-on's down, then up) is refused
    # for a moment more ("ServiceUnavailable ... Kind=RayCluster not found"), so wait until each lists.
    deadline = time.monotonic() + 60
    for crd in a.crd_names:
        while True:
            try:
                dc.kubectl(paths, "get", crd, "-A", "--chunk-size=1", "-o", "name")
                break
            except dc.ClusterError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


# --- Kueue --------------------------------------------------------------------------------------

def _cluster_ca(paths: dc.Paths) -> KeyPair:
    return KeyPair((paths.pki / "ca.crt").read_bytes(), (paths.pki / "ca.key").read_bytes())


def _write_pair(directory: Path, pair: KeyPair) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
        tmp = directory / f".{name}.{os.getpid()}"
        tmp.write_bytes(data)
        tmp.chmod(0o600)
        tmp.replace(directory / name)


def ensure_kueue_metrics_certs(directory: Path = KUEUE_METRICS_CERTS) -> None:
    """Kueue v0.17 refuses to start without a pair at this fixed path (see the module docstring)."""
    if (directory / "tls.crt").is_file() and (directory / "tls.key").is_file():
        return
    ca = make_ca("kubegang-local-kueue-metrics")
    try:
        _write_pair(directory, make_leaf(ca, "kueue-metrics", server_names=["localhost", "127.0.0.1"]))
    except OSError as exc:
        raise dc.ClusterError(
            f"Kueue {KUEUE.version} reads its metrics certificate from {directory}/tls.crt and tls.key "
            f"(a path it fixes); they are missing and cannot be written: {exc}. Create them once "
            f"(any valid certificate and key) or run as a user who may write there") from exc


def kueue_config(paths: dc.Paths, ports: dict[str, int], cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        "featureGates": {"VisibilityOnDemand": False},
        # kubegang's operator's client rate limit (its --api-qps/--api-burst defaults), not Kueue's own
        # default of 20/30 (50/100 in its shipped manifests): side by side, the benchmark compares
        # admission, not two clients' throttles.
        "clientConnection": {"qps": KUEUE_CLIENT_QPS, "burst": KUEUE_CLIENT_BURST},
        # Kueue's shipped configuration (config/components/manager/controller_manager_config.yaml):
        # without it every controller runs one worker, and a Job waits tens of seconds between its
        # admission and its unsuspension in a burst of 200.
        "controller": {"groupKindConcurrency": dict(KUEUE_CONCURRENCY)},
    }


def _kept(webhook: dict[str, Any]) -> bool:
    return any((group, resource) in KUEUE_WEBHOOK_RESOURCES or (group, "*") in KUEUE_WEBHOOK_RESOURCES
               for rule in webhook.get("rules", []) for group in rule.get("apiGroups", [])
               for resource in rule.get("resources", []))


def kueue_webhook_configurations(manifests: str, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's own webhook manifests, pointed at ``url`` and narrowed as the module docstring says."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        doc = dict(doc)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        hooks = []
        for hook in doc.get("webhooks", []):
            if not _kept(hook):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook = {**hook, "clientConfig": {"url": f"{url}{path}", "caBundle": ca_bundle}}
            if not any(g == "kueue.x-k8s.io" for r in hook["rules"] for g in r.get("apiGroups", [])):
                hook["objectSelector"] = {"matchExpressions": [{"key": KUEUE_QUEUE_LABEL, "operator": "Exists"}]}
                hook["namespaceSelector"] = {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", KUEUE_NAMESPACE]}]}
            hooks.append(hook)
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def _kueue_webhook_answers(paths: dc.Paths) -> bool:
    """A ClusterQueue created with --dry-run=server passes through Kueue's mutating and validating
    webhooks: only when that succeeds can anything be queued."""
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": "kubegang-kueue-probe"}, "spec": {"namespaceSelector": {}}}
    out = dc.kubectl(paths, "create", "--dry-run=server", "-f", "-", "-o", "jsonpath={.metadata.name}",
                     input_text=json.dumps(probe), check=False)
    return out == "kubegang-kueue-probe"


def _up_kueue(paths: dc.Paths) -> dict[str, Any]:
    ports = {"webhook": free_port(), "health": free_port(), "metrics": free_port()}
    root = paths.root / "kueue"
    cert_dir = root / "serving-certs"
    _write_pair(cert_dir, make_leaf(_cluster_ca(paths), "kueue-webhook", server_names=["127.0.0.1", "localhost"]))
    ensure_kueue_metrics_certs()
    if dc.kubectl(paths, "get", "namespace", KUEUE_NAMESPACE, check=False) == "":
        dc.kubectl(paths, "create", "namespace", KUEUE_NAMESPACE)

    url = f"https://127.0.0.1:{ports['webhook']}"
    ca_bundle = base64.b64encode((paths.pki / "ca.crt").read_bytes()).decode()
    _apply_crds(paths, KUEUE)
    conversion = {"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": {"url": f"{url}/convert", "caBundle": ca_bundle}, "conversionReviewVersions": ["v1"]}}}}
    for crd in KUEUE_CONVERTED_CRDS:
        dc.kubectl(paths, "patch", "crd", f"{crd}.kueue.x-k8s.io", "--type=merge", "-p", json.dumps(conversion))

    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(kueue_config(paths, ports, cert_dir)))
    dc.start(paths, KUEUE.process, [str(KUEUE.binary), f"--config={config}", "--zap-log-level=info"],
             env={"KUBECONFIG": str(paths.kubeconfig)})
    health = f"http://127.0.0.1:{ports['health']}"
    dc.wait_for(paths, KUEUE.process, lambda: http_status(f"{health}/readyz") == 200, 90)

    hooks = kueue_webhook_configurations(
        (KUEUE.folder / "webhook" / "manifests.yaml").read_text(), url, ca_bundle)
    dc.kubectl(paths, "apply", "--server-side", "--force-conflicts", "--field-manager", "kubegang-kueue",
               "-f", "-", input_text=yaml.safe_dump_all(hooks))
    dc.wait_for(paths, KUEUE.process, lambda: _kueue_webhook_answers(paths), 60)
    return {"ports": ports, "webhook_url": url, "namespace": KUEUE_NAMESPACE, "config": str(config),
            "frameworks": list(KUEUE_FRAMEWORKS)}


# --- KubeRay ------------------------------------------------------------------------------------

def _up_kuberay(paths: dc.Paths) -> dict[str, Any]:
    ports = {"health": free_port(), "metrics": free_port(), "ray_heads": free_port()}
    _apply_crds(paths, KUBERAY)
    dc.start(paths, RAY_HEADS, [sys.executable, str(Path(__file__).with_name("rayheads.py")),
                                f"--port={ports['ray_heads']}", "--follow-submitters"])
    heads = f"http://127.0.0.1:{ports['ray_heads']}"
    dc.wait_for(paths, RAY_HEADS, lambda: _answers(f"{heads}/"), 30)
    dc.start(paths, KUBERAY.process, [
        str(KUBERAY.binary), f"--metrics-addr=127.0.0.1:{ports['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['health']}", "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ], env={"KUBECONFIG": str(paths.kubeconfig), "HTTP_PROXY": heads, "http_proxy": heads,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    dc.wait_for(paths, KUBERAY.process,
                lambda: http_status(f"http://127.0.0.1:{ports['health']}/readyz") == 200, 90)
    return {"ports": ports}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/cluster addon", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=ADDONS)
    parser.add_argument("action", choices=["up", "down"])
    args = parser.parse_args(argv)
    paths = dc.cluster_paths()
    try:
        if args.action == "up":
            up(paths, args.name)
        else:
            down(paths, args.name)
    except (dc.ClusterError, OSError, ValueError) as exc:
        dc.log(f"ERROR: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
