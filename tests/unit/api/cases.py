"""The validation table (validation-cases.yaml) as manifests: shared by the unit tests here and the
kube-apiserver tests in tests/e2e, which load this file by path (test folders are not packages)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import yaml

TABLE = Path(__file__).with_name("validation-cases.yaml")


@dataclasses.dataclass(frozen=True)
class Case:
    """One manifest of the table."""

    name: str
    manifest: dict[str, Any]
    field: str | None
    """The field an invalid manifest's error must name (Kubernetes spelling); None when valid."""


def _walk(document: Any, parts: list[str]) -> Any:
    for part in parts:
        document = document[int(part)] if isinstance(document, list) else document.setdefault(part, {})
    return document


def _build(bases: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    manifest: dict[str, Any] = copy.deepcopy(bases[entry["base"]])
    for path in entry.get("delete", []):
        *parent, last = path.split(".")
        del _walk(manifest, parent)[last]
    for path, value in entry.get("set", {}).items():
        *parent, last = path.split(".")
        target = _walk(manifest, parent)
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return manifest


def load(section: str) -> list[Case]:
    """The ``invalid`` or ``valid`` cases."""
    table = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    return [
        Case(name=entry["case"], manifest=_build(table["bases"], entry), field=entry.get("field"))
        for entry in table[section]
    ]


def k8s_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location in Kubernetes' spelling: ``spec.containers[0].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
