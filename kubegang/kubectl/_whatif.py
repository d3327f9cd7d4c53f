"""``kubectl gang what-if -f job.yaml`` and ``replay FILE -f job.yaml``: would this GPUJob start now,
where, and whom would it preempt, without creating anything.

The manifest is validated by the API models (the CRD's own rules), added to the engine as a new
waiting job, and the engine's dry-run admission cycle answers, exactly as for ``why``: live objects
for ``what-if``, a saved snapshot for ``replay``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kubegang.kubectl._engine import Engine
from kubegang.kubectl._why import why_report

WHAT_IF_UID = "kubectl-gang-what-if"


class ManifestError(ValueError):
    """A ``-f`` file that is not one valid GPUJob; the message names the file and the field."""


def read_manifest(path: Path) -> dict[str, Any]:
    """The single GPUJob in ``path`` (``-`` is not supported: a file is what was asked for)."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as exc:
        raise ManifestError(f"-f {path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"-f {path}: not YAML: {exc}") from None
    jobs = [d for d in docs if isinstance(d, Mapping) and d.get("kind") == "GPUJob"]
    if len(jobs) != 1:
        kinds = ", ".join(str(d.get("kind")) if isinstance(d, Mapping) else type(d).__name__ for d in docs) or "none"
        raise ManifestError(f"-f {path}: must hold exactly one GPUJob (kind: GPUJob), found: {kinds}")
    return dict(jobs[0])


def what_if_report(engine: Engine, manifest: Mapping[str, Any], namespace: str, now: dt.datetime) -> dict[str, Any]:
    """Add ``manifest`` as a new waiting job (a UID of its own, created now) and answer for it."""
    meta = dict(manifest.get("metadata") or {})
    meta.setdefault("namespace", namespace)
    if not meta.get("name"):
        raise ManifestError("metadata.name: required")
    meta.update(uid=WHAT_IF_UID, generation=1, creationTimestamp=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    body = {**manifest, "metadata": meta, "status": {}}
    view = engine.add_job(body)
    if view is None:
        key = f"{meta['namespace']}/{meta['name']}"
        raise ManifestError(f"GPUJob {key}: {engine.invalid.get(key, 'invalid')}")
    report = why_report(engine, view, now)
    report["whatIf"] = True
    return report
