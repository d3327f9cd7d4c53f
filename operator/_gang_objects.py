"""Build every object of one gang: its pods and, per framework, a headless Service and a hostfile.

Pure functions from a job and its placement to manifests (dicts), so what the operator creates is
fully determined by what the admission recorded; a new leader re-deriving the same objects creates
the same names, and AlreadyExists means the work was already done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kubegang.api import Placement, ReplicaPlacement
from kubegang.operator._job import JobView, with_gpu_limit
from kubegang.podcontract import (
    ATTEMPT_LABEL,
    GPU_MILLI_ANNOTATION,
    GPUS_ANNOTATION,
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    NODE_ANNOTATION,
    POD_INDEX_LABEL,
)

GROUP = "kubegang.io"
VERSION = "v1alpha1"
SCHEDULER_NAME = "kubegang"

DEFAULT_MASTER_PORT = 29500
HOSTFILE_KEY = "hostfile"
HOSTFILE_DIR = "/etc/kubegang/mpi"


@dataclasses.dataclass(frozen=True)
class GangObjects:
    """Everything one admission creates, in creation order (Service and ConfigMap before pods)."""

    pods: tuple[dict[str, Any], ...]
    """One pod per replica, named ``<job>-<index>``."""
    service: dict[str, Any] | None
    """The headless Service ``<job>`` for torchrun and mpi (stable per-pod DNS names)."""
    config_map: dict[str, Any] | None
    """The MPI hostfile ConfigMap ``<job>-hostfile``."""


def owner_reference(job: JobView) -> dict[str, Any]:
    """The owner reference that makes Kubernetes' garbage collector delete a gang with its job."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUJob",
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_name(job: JobView, index: int) -> str:
    """``<job>-<index>``: deterministic, so re-creation after a failover is idempotent."""
    return f"{job.name}-{index}"


def pod_dns_name(job: JobView, index: int) -> str:
    """The stable DNS name of replica ``index`` through the headless Service."""
    return f"{pod_name(job, index)}.{job.name}.{job.namespace}.svc"


def job_labels(job: JobView) -> dict[str, str]:
    """Labels that select every object of the gang (the pod watch filters on the first)."""
    return {JOB_NAME_LABEL: job.name, JOB_UID_LABEL: job.uid}


def framework_env(job: JobView, index: int, master_port: int = DEFAULT_MASTER_PORT) -> list[dict[str, str]]:
    """Environment for replica ``index`` of ``job`` under its framework.

    torchrun follows the Kubeflow PyTorchJob convention: one pod is one node, so WORLD_SIZE and
    NNODES count pods, RANK and NODE_RANK are the pod index, and NPROC_PER_NODE is its GPU count
    (``torchrun --nnodes=$NNODES --node_rank=$NODE_RANK --nproc_per_node=$NPROC_PER_NODE``).
    """
    env = [
        {"name": "KUBEGANG_JOB_NAME", "value": job.name},
        {"name": "KUBEGANG_REPLICA_INDEX", "value": str(index)},
        {"name": "KUBEGANG_REPLICAS", "value": str(job.replicas)},
    ]
    if job.spec.framework == "torchrun":
        env += [
            {"name": "MASTER_ADDR", "value": pod_dns_name(job, 0)},
            {"name": "MASTER_PORT", "value": str(master_port)},
            {"name": "WORLD_SIZE", "value": str(job.replicas)},
            {"name": "RANK", "value": str(index)},
            {"name": "NODE_RANK", "value": str(index)},
            {"name": "NNODES", "value": str(job.replicas)},
            {"name": "NPROC_PER_NODE", "value": str(max(job.gpus_per_replica, 1))},
        ]
    elif job.spec.framework == "mpi":
        hostfile = f"{HOSTFILE_DIR}/{HOSTFILE_KEY}"
        env += [
            {"name": "OMPI_MCA_orte_default_hostfile", "value": hostfile},
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "KUBEGANG_HOSTFILE", "value": hostfile},
        ]
    return env


def mpi_hostfile(job: JobView) -> str:
    """The MPI hostfile: one line per pod, its DNS name and ``slots`` = its GPUs."""
    slots = max(job.gpus_per_replica, 1)
    return "".join(f"{pod_dns_name(job, i)} slots={slots}\n" for i in range(job.replicas))


def _merge_env(existing: list[dict[str, Any]], ours: list[dict[str, str]]) -> list[dict[str, Any]]:
    # Ours win on a name clash: they describe the gang as placed, which the template cannot know.
    names = {item["name"] for item in ours}
    return [item for item in existing if item.get("name") not in names] + [dict(item) for item in ours]


def _pin_to_node(spec: dict[str, Any], node: str) -> None:
    # Node selector terms are ORed, so the pin is added to every existing term (AND within a term);
    # otherwise a user's own affinity term would let the pod escape its planned node.
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or []), pin]
    required["nodeSelectorTerms"] = terms


def _share_gpu(spec: dict[str, Any], slot: ReplicaPlacement, milli: int, shared_resource: str | None) -> None:
    """Give a shared-GPU pod what a node needs to honour its share: the device it may see and, with
    the device plugin's sharing mode configured, one replica of its shared resource."""
    visible = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(str(g) for g in slot.gpus)},
               {"name": "KUBEGANG_GPU_MILLI", "value": str(milli)}]
    # Init containers too: one built on a CUDA image inherits the image's NVIDIA_VISIBLE_DEVICES=all
    # and would see every GPU of the node otherwise.
    for container in spec.get("initContainers") or []:
        container["env"] = _merge_env(list(container.get("env") or []), visible)
    for index, container in enumerate(spec.get("containers") or []):
        container["env"] = _merge_env(list(container.get("env") or []), visible)
        if shared_resource and index == 0:
            resources = container.setdefault("resources", {})
            for key in ("limits", "requests"):
                resources[key] = {**(resources.get(key) or {}), shared_resource: 1}


def build_pod(
    job: JobView,
    slot: ReplicaPlacement,
    *,
    master_port: int = DEFAULT_MASTER_PORT,
    shared_gpu_resource: str | None = None,
) -> dict[str, Any]:
    """The pod for replica ``slot.index`` of ``job``, pinned to ``slot.node``.

    ``gpusPerReplica`` becomes the first container's ``nvidia.com/gpu`` limit, so the pod carries the
    GPUs that were planned and charged for it. A shared-GPU pod (``gpuFraction``) gets the GPU index and
    share as annotations (the extender counts the share on that GPU), ``NVIDIA_VISIBLE_DEVICES``, and
    ``shared_gpu_resource`` (e.g. ``nvidia.com/gpu.shared`` of the device plugin's time-slicing mode)
    when the cluster has one.
    """
    template: Mapping[str, Any] = job.template
    meta_t = template.get("metadata") or {}
    spec = with_gpu_limit(template.get("spec") or {}, job.spec.gpus_per_replica)
    labels = {
        **(meta_t.get("labels") or {}),
        **job_labels(job),
        POD_INDEX_LABEL: str(slot.index),
        ATTEMPT_LABEL: str(job.attempt),
    }
    annotations = {**(meta_t.get("annotations") or {}), NODE_ANNOTATION: slot.node}
    if slot.gpus:
        annotations[GPUS_ANNOTATION] = ",".join(str(g) for g in slot.gpus)
    if job.gpu_milli:
        annotations[GPU_MILLI_ANNOTATION] = str(job.gpu_milli)
        _share_gpu(spec, slot, job.gpu_milli, shared_gpu_resource)
    spec["schedulerName"] = SCHEDULER_NAME
    spec["restartPolicy"] = "Never"
    if job.spec.priority_class_name:
        spec["priorityClassName"] = job.spec.priority_class_name
    _pin_to_node(spec, slot.node)
    if job.spec.framework in ("torchrun", "mpi"):
        spec["hostname"] = pod_name(job, slot.index)
        spec["subdomain"] = job.name
    env = framework_env(job, slot.index, master_port)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            container["env"] = _merge_env(list(container.get("env") or []), env)
    if job.spec.framework == "mpi":
        volumes = spec.setdefault("volumes", [])
        volumes.append({"name": "kubegang-hostfile", "configMap": {"name": hostfile_config_map_name(job)}})
        for container in spec.get("containers") or []:
            mounts = container.setdefault("volumeMounts", [])
            mounts.append({"name": "kubegang-hostfile", "mountPath": HOSTFILE_DIR, "readOnly": True})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job, slot.index),
            "namespace": job.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def hostfile_config_map_name(job: JobView) -> str:
    """``<job>-hostfile``."""
    return f"{job.name}-hostfile"


def build_service(job: JobView, *, master_port: int = DEFAULT_MASTER_PORT) -> dict[str, Any]:
    """The headless Service that gives each pod the DNS name ``<pod>.<job>.<ns>.svc``.

    ``publishNotReadyAddresses`` because rendezvous happens before any pod is Ready.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": job_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME_LABEL: job.name, JOB_UID_LABEL: job.uid},
            "ports": [{"name": "rendezvous", "port": master_port, "targetPort": master_port}],
        },
    }


def build_config_map(job: JobView) -> dict[str, Any]:
    """The MPI hostfile ConfigMap."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": hostfile_config_map_name(job),
            "namespace": job.namespace,
            "labels": job_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "data": {HOSTFILE_KEY: mpi_hostfile(job)},
    }


def build_gang(
    job: JobView,
    placement: Placement,
    *,
    master_port: int = DEFAULT_MASTER_PORT,
    shared_gpu_resource: str | None = None,
) -> GangObjects:
    """Every object of ``job``'s gang for ``placement``; ValueError if the placement does not cover it."""
    indices = sorted(slot.index for slot in placement.pods)
    if indices != list(range(job.replicas)):
        raise ValueError(f"placement for {job.key} covers replicas {indices}, expected 0..{job.replicas - 1}")
    pods = tuple(
        build_pod(job, slot, master_port=master_port, shared_gpu_resource=shared_gpu_resource)
        for slot in sorted(placement.pods, key=lambda slot: slot.index)
    )
    needs_dns = job.spec.framework in ("torchrun", "mpi")
    return GangObjects(
        pods=pods,
        service=build_service(job, master_port=master_port) if needs_dns else None,
        config_map=build_config_map(job) if job.spec.framework == "mpi" else None,
    )
