"""The local control plane behaves like a cluster with GPU nodes, as a user sees it through kubectl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)


def _gpu_pod(name: str, gpus: int, **annotations: str) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/train:1",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def test_versions_are_the_pinned_ones(cluster: Cluster) -> None:
    server = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert server["clientVersion"]["gitVersion"] == cluster.versions["KUBERNETES_VERSION"]
    if cluster.cluster_dir is not None:  # an external cluster runs whatever version it runs
        assert server["serverVersion"]["gitVersion"] == cluster.versions["KUBERNETES_VERSION"]


def test_gpu_nodes_listed_by_label(cluster: Cluster) -> None:
    cluster.use_shape("superpod-h100")
    out = cluster.kubectl("get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name").stdout.split()
    assert len(out) == 128
    node = cluster.get_json("node", "su1-000")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"]["kubegang.io/leaf"] == "su1-rail-leaves"


def test_eight_gpu_pod_runs_on_a_fake_node(cluster: Cluster, namespace: str) -> None:
    cluster.use_shape("superpod-h100")
    cluster.apply(_gpu_pod("train", 8) | {"metadata": {"name": "train", "namespace": namespace}})

    def running() -> bool:
        pod = cluster.get_json("pod", "train", "-n", namespace)
        return pod["status"].get("phase") == "Running"

    cluster.wait_for("pod train Running", running, timeout=60)
    pod = cluster.get_json("pod", "train", "-n", namespace)
    assert pod["spec"]["nodeName"].startswith("su")


def test_too_many_gpus_stays_pending_with_scheduler_reason(cluster: Cluster, namespace: str) -> None:
    cluster.use_shape("superpod-h100")
    cluster.apply(_gpu_pod("huge", 9) | {"metadata": {"name": "huge", "namespace": namespace}})

    def reason() -> str:
        events = cluster.get_json("events", "-n", namespace, "--field-selector", "involvedObject.name=huge")
        return " ".join(e.get("message", "") for e in events["items"] if e.get("reason") == "FailedScheduling")

    cluster.wait_for("a FailedScheduling event", lambda: bool(reason()), timeout=60)
    assert "Insufficient nvidia.com/gpu" in reason()
    pod = cluster.get_json("pod", "huge", "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert "nodeName" not in pod["spec"]


def test_fake_runtime_annotation_completes_the_pod(cluster: Cluster, namespace: str) -> None:
    cluster.use_shape("superpod-h100")
    manifest = _gpu_pod("short", 1, **{"kubegang.io/fake-runtime": "2s"})
    manifest["metadata"] = {"name": "short", "namespace": namespace,
                            "annotations": {"kubegang.io/fake-runtime": "2s"}}
    cluster.apply(manifest)
    cluster.wait_for("pod short Succeeded", lambda: cluster.get_json(
        "pod", "short", "-n", namespace)["status"].get("phase") == "Succeeded", timeout=60)


def test_helm_is_the_pinned_build(cluster: Cluster) -> None:
    out = cluster.helm("version", "--short")
    assert out.stdout.startswith(cluster.versions["HELM_VERSION"])


def test_a_control_plane_process_that_exits_is_started_again(cluster: Cluster, namespace: str) -> None:
    """hack/supervise.py plays the kubelet: kube-scheduler SIGKILLed comes back and schedules again."""
    from . import processes

    assert cluster.cluster_dir is not None, "needs the cluster that hack/cluster starts"
    cluster.use_shape("superpod-h100")
    old = processes.pid_of(cluster.cluster_dir, "kube-scheduler")
    assert old is not None
    processes.kill(cluster.cluster_dir, "kube-scheduler")
    new = processes.wait_restarted(cluster.cluster_dir, "kube-scheduler", old)
    assert processes.alive(new)
    cluster.apply(_gpu_pod("after", 1) | {"metadata": {"name": "after", "namespace": namespace}})
    cluster.wait_for("a pod scheduled by the restarted kube-scheduler", lambda: cluster.get_json(
        "pod", "after", "-n", namespace)["spec"].get("nodeName"), timeout=60)
    log = (cluster.cluster_dir / "logs" / "kube-scheduler.log").read_text(errors="replace")
    assert "supervise: kube-scheduler exited" in log


def _listening(pid: int) -> list[tuple[str, str, int]]:
    """(protocol, local address as /proc/net/tcp writes it, port) of every TCP socket ``pid`` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:  # closed since listed
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for proto in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.append((proto, address, int(port, 16)))
    return found


def _loopback(proto: str, address: str) -> bool:
    """127.0.0.0/8, ::1, or ::ffff:127.x.x.x, in /proc/net/tcp's hex (IPv4 little-endian: 127 is the last byte)."""
    if proto == "tcp":
        return address.endswith("7F")
    return address == "00000000000000000000000001000000" or (
        address.startswith("0000000000000000FFFF0000") and address.endswith("7F"))


def test_every_process_of_the_local_stack_listens_on_loopback_only(cluster: Cluster, kubegang: Any) -> None:
    """README: every process listens on loopback (the house rule for tests: no port is reachable from
    another machine). The operators' metrics and health ports listened on every interface until
    ``--listen-address`` was given to them."""
    assert cluster.cluster_dir is not None, "needs the local control plane"
    checked, wide = [], []
    for pid_file in sorted((cluster.cluster_dir / "pids").glob("*.pid")):
        try:
            pid = int(pid_file.read_text())
            sockets = _listening(pid)
        except (OSError, ValueError):  # a process of an add-on that is not running
            continue
        checked.append(pid_file.stem)
        wide += [f"{pid_file.stem}: {proto} {address}:{port}" for proto, address, port in sockets
                 if not _loopback(proto, address)]
    assert {"kube-apiserver", "etcd", "kubegang-extender", "kubegang-operator-0", "kubegang-agent"} <= set(checked)
    assert not wide, f"listening beyond loopback: {wide}"
