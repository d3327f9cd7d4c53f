"""``kubectl gang``: why a GPUJob is pending, where it is in the queue, what if one submitted this.

A kubectl plugin (the console script ``kubectl-gang``) that answers with kubegang's own engine
rebuilt from what the user's kubeconfig may read; see docs/why-pending.md.

Public API::

    main                     the entry point
    ClusterObjects           what was read (and the snapshot file's content)
    Engine                   the operator's quota book, the extender's ledger and one dry-run cycle over them
    why_report, queues_report, nodes_report, what_if_report   each command's machine form
"""

from kubegang.kubectl._engine import Engine
from kubegang.kubectl._main import main
from kubegang.kubectl._nodes import nodes_report
from kubegang.kubectl._objects import ClusterObjects, SnapshotFileError
from kubegang.kubectl._queues import queues_report
from kubegang.kubectl._whatif import ManifestError, what_if_report
from kubegang.kubectl._why import why_report

__all__ = [
    "ClusterObjects",
    "Engine",
    "ManifestError",
    "SnapshotFileError",
    "main",
    "nodes_report",
    "queues_report",
    "what_if_report",
    "why_report",
]
