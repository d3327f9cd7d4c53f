"""Reading the cluster as the user: lightkube with their kubeconfig, and their RBAC.

Lists what the engine needs (GPUJobs, GPUQueues, pods, Nodes, GPUNodes, PriorityClasses). A list the
user may not make cluster-wide falls back to their namespace (jobs, pods) or to nothing (nodes), and
is recorded in ``ClusterObjects.hidden``: answers then say what they could not see, and other teams'
jobs are shown as counts, never by name. Nothing here decides anything.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx
import httpx2
from lightkube import ApiError, Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.scheduling_v1 import PriorityClass

from kubegang._flags import check_ca, check_cert_and_key
from kubegang.kubectl._objects import ClusterObjects

GPUJob = create_namespaced_resource("kubegang.io", "v1alpha1", "GPUJob", "gpujobs")
GPUQueue = create_global_resource("kubegang.io", "v1alpha1", "GPUQueue", "gpuqueues")
GPUNode = create_global_resource("kubegang.io", "v1alpha1", "GPUNode", "gpunodes")


class ClusterError(RuntimeError):
    """The cluster could not be read at all (no kubeconfig, unreachable, a job that does not exist)."""


class JobNotFound(ClusterError):
    """The GPUJob asked about does not exist (exit status 1, as for one missing from a snapshot)."""


def client(kubeconfig: str | None = None, context: str | None = None) -> tuple[Client, str]:
    """A client for the user's kubeconfig (``$KUBECONFIG`` or ~/.kube/config), and its default namespace."""
    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
        single = config.get(context_name=context)
        if single is None:
            raise ValueError(f"no context {context or '(current)'}")
    except Exception as exc:
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        raise ClusterError(f"cannot load a kubeconfig ({where}): {exc}") from None
    return Client(config=single), single.namespace or "default"


def _dump(obj: Any) -> dict[str, Any]:
    data = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    return dict(data)


def _forbidden(exc: ApiError) -> bool:
    return exc.status.code in (401, 403)


def _list(kube: Client, kind: Any, namespace: str | None = None) -> list[dict[str, Any]]:
    if namespace is None:
        return [_dump(o) for o in kube.list(kind)]
    return [_dump(o) for o in kube.list(kind, namespace=namespace)]


def read_cluster(kube: Client, namespace: str, *, source: str = "") -> ClusterObjects:
    """Everything the engine needs that the user may read; ``namespace`` is where to fall back to."""
    try:
        return _read_cluster(kube, namespace, source)
    except httpx2.HTTPError as exc:
        raise ClusterError(f"cannot reach the API server: {exc}") from None


def _read_cluster(kube: Client, namespace: str, source: str) -> ClusterObjects:
    out = ClusterObjects(source=source)
    try:
        out.queues = _list(kube, GPUQueue)
    except ApiError as exc:
        if not _forbidden(exc):
            raise ClusterError(f"listing GPUQueues failed: {exc.status.message}") from None
        out.hidden["gpuqueues"] = exc.status.message or "forbidden"
    scoped: tuple[tuple[str, Any, str], ...] = (("jobs", GPUJob, "gpujobs"), ("pods", Pod, "pods"))
    for attr, kind, label in scoped:
        try:
            setattr(out, attr, _list(kube, kind, "*"))
        except ApiError as exc:
            if not _forbidden(exc):
                raise ClusterError(f"listing {label} failed: {exc.status.message}") from None
            out.hidden[label] = f"only namespace {namespace}: {exc.status.message or 'forbidden'}"
            try:
                setattr(out, attr, _list(kube, kind, namespace))
            except ApiError as inner:
                if not _forbidden(inner):
                    raise ClusterError(f"listing {label} failed: {inner.status.message}") from None
                out.hidden[label] = inner.status.message or "forbidden"
    cluster_wide: tuple[tuple[str, Any, str], ...] = (
        ("nodes", Node, "nodes"), ("gpunodes", GPUNode, "gpunodes"),
        ("priority_classes", PriorityClass, "priorityclasses"))
    for attr, kind, label in cluster_wide:
        try:
            setattr(out, attr, _list(kube, kind))
        except ApiError as exc:
            if not _forbidden(exc):
                raise ClusterError(f"listing {label} failed: {exc.status.message}") from None
            out.hidden[label] = exc.status.message or "forbidden"
    return out


def read_job(kube: Client, namespace: str, name: str) -> dict[str, Any]:
    """One GPUJob (the user may be allowed to get it even where listing is refused)."""
    try:
        return _dump(kube.get(GPUJob, name, namespace=namespace))
    except ApiError as exc:  # before HTTPError: an ApiError is one
        if exc.status.code == 404:
            raise JobNotFound(f"GPUJob {namespace}/{name} not found") from None
        raise ClusterError(f"reading GPUJob {namespace}/{name} failed: {exc.status.message}") from None
    except httpx2.HTTPError as exc:
        raise ClusterError(f"cannot reach the API server: {exc}") from None


def fetch_extender_snapshot(url: str, tls_dir: Path, timeout: float = 10.0,
                            token_file: Path | None = None, server_name: str | None = None) -> dict[str, Any]:
    """The extender's ``/debug/snapshot`` over its mTLS listener, with the bearer token in
    ``token_file``: an extender with metrics auth on (the chart's default) also wants one whose user
    RBAC allows ``get`` on ``/debug/snapshot``.

    ``tls_dir`` holds ``ca.crt`` and the client pair as the demo's PKI names it (``client.crt``/``.key``)
    or as a ``kubernetes.io/tls`` Secret of the chart does (``tls.crt``/``.key``). ``server_name``: the
    name the extender's certificate carries (its Service's DNS name), for a URL that reaches it by
    another name (``kubectl port-forward`` to 127.0.0.1)."""
    pair = next(((tls_dir / crt, tls_dir / key) for crt, key in (("client.crt", "client.key"), ("tls.crt", "tls.key"))
                 if (tls_dir / crt).is_file() and (tls_dir / key).is_file()), None)
    files = {"ca.crt": tls_dir / "ca.crt"}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if pair is None:
        missing.append(f"{tls_dir / 'client.crt'} and {tls_dir / 'client.key'} (or tls.crt and tls.key)")
    if missing or pair is None:
        raise ClusterError(f"--tls-dir {tls_dir}: missing {', '.join(missing)}")
    files["client.crt"], files["client.key"] = pair
    try:
        # Checked as the processes check theirs: a file that is not PEM, or a key that is not the
        # certificate's, is one line naming it, not an ssl traceback.
        check_ca("--tls-dir", files["ca.crt"])
        check_cert_and_key("--tls-dir", files["client.crt"], "--tls-dir", files["client.key"])
    except ValueError as exc:
        raise ClusterError(str(exc)) from None
    headers = {}
    if token_file is not None:
        try:
            headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
        except OSError as exc:
            raise ClusterError(f"--token-file {token_file}: {exc.strerror or exc}") from None
    context = ssl.create_default_context(cafile=str(files["ca.crt"]))
    context.load_cert_chain(str(files["client.crt"]), str(files["client.key"]))
    try:
        with httpx.Client(verify=context, timeout=timeout) as client:
            request = client.build_request("GET", url.rstrip("/") + "/debug/snapshot", headers=headers,
                                           extensions={"sni_hostname": server_name} if server_name else None)
            response = client.send(request)
        if response.status_code in (401, 403):
            raise ClusterError(
                f"--extender {url}: /debug/snapshot refused ({response.status_code}: {response.text.strip()}); "
                "the extender checks who reads it: give --token-file with a token whose user may get the "
                "non-resource URL /debug/snapshot (docs/metrics.md, 'Who may scrape')")
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ClusterError(f"--extender {url}: cannot fetch /debug/snapshot: {exc}") from None
    if not isinstance(data, dict):
        raise ClusterError(f"--extender {url}: /debug/snapshot did not answer a JSON object")
    return data
