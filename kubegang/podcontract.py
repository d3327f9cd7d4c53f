"""The labels and annotations a gang pod carries: the contract between operator and extender.

The operator writes them when it creates a gang's pods; the extender reads them to know which
reservation a pod realises, and to rebuild every reservation from the API after a restart. Both
import these names from here, so the two sides can never spell them differently.
"""

from __future__ import annotations

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource kubegang manages (``managedResources`` in the scheduler configuration)."""
NODE_ANNOTATION = "kubegang.io/node"
"""Planned node of a gang pod; the extender's filter passes this node only."""
GPUS_ANNOTATION = "kubegang.io/gpus"
"""Comma-separated GPU indices planned on that node, e.g. ``0,1,2,3``."""
JOB_UID_LABEL = "kubegang.io/job-uid"
"""UID of the GPUJob a pod belongs to; every pod of one gang carries the same value."""
JOB_NAME_LABEL = "kubegang.io/job-name"
"""Name of that GPUJob (for humans and selectors; the UID is what identifies the gang)."""
POD_INDEX_LABEL = "kubegang.io/replica-index"
"""Index of the pod within its gang (0..replicas-1), matching the plan's pod index."""
ATTEMPT_LABEL = "kubegang.io/attempt"
"""Which start of the gang the pod belongs to; a restart creates pods of a new attempt."""
GPU_MILLI_ANNOTATION = "kubegang.io/gpu-milli"
"""Thousandths of the one GPU in ``kubegang.io/gpus`` that a shared-GPU pod (``gpuFraction``) may use,
e.g. ``250``; absent on whole-GPU pods. The extender counts the share on that GPU, so whole-GPU pods
never land on it."""
ADMISSION_GATE = "kubegang.io/admission"
"""A scheduling gate a pod of a pod group (or any pod kubegang adopts) may carry so that kube-scheduler
does not even try it before kubegang admitted its gang; the operator lifts it when it pins the pod."""

LABEL_VALUE_MAX = 63
"""The longest label value Kubernetes accepts."""


def label_value(text: str) -> str:
    """``text`` (an object's name) as a label value: cut to 63 characters, and whatever the cut leaves at
    either end that is not a letter or digit dropped, since a label value must begin and end with one
    (``"a" * 62 + "-b"`` gives 62 ``a``, not ``a...a-``, which the API server refuses)."""
    value = text[:LABEL_VALUE_MAX]
    start, end = 0, len(value)
    while start < end and not _alphanumeric(value[start]):
        start += 1
    while end > start and not _alphanumeric(value[end - 1]):
        end -= 1
    return value[start:end]


def _alphanumeric(char: str) -> bool:
    return char.isascii() and char.isalnum()
