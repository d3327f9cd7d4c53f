"""What ``kubectl gang`` read from the cluster: the API objects the engine is rebuilt from.

The plugin answers with the production engine (the operator's quota book, the extender's ledger, the
core admission cycle) rebuilt from the same API objects the operator and the extender watch. That
set of objects is also the offline snapshot (``kubectl gang snapshot save``): replaying a file runs
the very code a live answer runs, on the very inputs it had, plus the extender's own
``/debug/snapshot`` when it could be fetched.

A user's RBAC may hide some of it (other namespaces' jobs and pods, nodes): what could not be read is
named in ``hidden``, so every answer can say what it could not see instead of pretending.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BUNDLE_KIND = "kubegang.io/GangSnapshot"
"""The ``kind`` of a saved snapshot file (``kubectl gang snapshot save``)."""
BUNDLE_VERSION = 1


class SnapshotFileError(ValueError):
    """A snapshot file that cannot be replayed; the message names the file and the field."""


@dataclasses.dataclass
class ClusterObjects:
    """API objects as listed (plain JSON), and what the user could not list."""

    jobs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """GPUJobs the user may see."""
    queues: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Every GPUQueue (cluster-scoped)."""
    pods: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Pods the user may see (all namespaces when allowed)."""
    nodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    gpunodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    priority_classes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    hidden: dict[str, str] = dataclasses.field(default_factory=dict)
    """Kind -> why it could not be listed (cluster-wide), e.g. ``{"gpujobs": "forbidden ..."}``."""
    extender: dict[str, Any] | None = None
    """The extender's ``/debug/snapshot`` when it was fetched (reservations live only there)."""
    source: str = ""
    """Where these came from: a kubeconfig context or a snapshot file."""

    def to_bundle(self) -> dict[str, Any]:
        """The snapshot file's content."""
        return {
            "kind": BUNDLE_KIND,
            "version": BUNDLE_VERSION,
            "source": self.source,
            "hidden": dict(self.hidden),
            "objects": {
                "gpujobs": self.jobs, "gpuqueues": self.queues, "pods": self.pods, "nodes": self.nodes,
                "gpunodes": self.gpunodes, "priorityclasses": self.priority_classes,
            },
            "extender": self.extender,
        }

    @classmethod
    def from_bundle(cls, data: Mapping[str, Any], where: str = "snapshot") -> ClusterObjects:
        """Read a snapshot file's content; SnapshotFileError names what is wrong."""
        if data.get("kind") != BUNDLE_KIND:
            raise SnapshotFileError(f"{where}: kind must be {BUNDLE_KIND!r} (written by `kubectl gang snapshot "
                                    f"save`), got {data.get('kind')!r}")
        if data.get("version") != BUNDLE_VERSION:
            raise SnapshotFileError(f"{where}: version must be {BUNDLE_VERSION}, got {data.get('version')!r}")
        objects = data.get("objects")
        if not isinstance(objects, Mapping):
            raise SnapshotFileError(f"{where}: objects must be a mapping of kind to a list of objects")

        def items(kind: str) -> list[dict[str, Any]]:
            value = objects.get(kind, [])
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise SnapshotFileError(f"{where}: objects.{kind} must be a list of objects")
            return value

        extender = data.get("extender")
        if extender is not None and not isinstance(extender, dict):
            raise SnapshotFileError(f"{where}: extender must be the extender's /debug/snapshot object or null")
        hidden = data.get("hidden") or {}
        if not isinstance(hidden, Mapping):
            raise SnapshotFileError(f"{where}: hidden must be a mapping of kind to a reason")
        return cls(jobs=items("gpujobs"), queues=items("gpuqueues"), pods=items("pods"), nodes=items("nodes"),
                   gpunodes=items("gpunodes"), priority_classes=items("priorityclasses"),
                   hidden={str(k): str(v) for k, v in hidden.items()}, extender=extender,
                   source=f"snapshot {where}")

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_bundle(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> ClusterObjects:
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise SnapshotFileError(f"{path}: cannot read: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise SnapshotFileError(f"{path}: not JSON (line {exc.lineno}): {exc.msg}") from None
        if not isinstance(data, Mapping):
            raise SnapshotFileError(f"{path}: must hold one JSON object")
        return cls.from_bundle(data, str(path))
