"""One kind's CustomResourceDefinition (apiextensions.k8s.io/v1), assembled from its model.

The schema comes from the model through :func:`kubegang.api._schema.structural`; everything else
(names, scope, printer columns) from the kind's :class:`~kubegang.api._resource.KindInfo`. The
root is patched as the API server wants it: ``apiVersion``/``kind`` plain strings and
``metadata`` an untyped object (the server validates metadata itself and refuses a CRD that
constrains more than name).
"""

from __future__ import annotations

from typing import Any

from kubegang.api._common import GROUP, VERSION
from kubegang.api._resource import PrinterColumn, Resource
from kubegang.api._schema import structural

_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")
_ROOT_FIELDS = {
    "apiVersion": {"type": "string", "description": "APIVersion of this object (kubegang.io/v1alpha1)."},
    "kind": {"type": "string", "description": "Kind of this object."},
    "metadata": {"type": "object"},
}


def crd_name(model: type[Resource]) -> str:
    """``<plural>.<group>``, the CRD's own name (and its file name without ``.yaml``)."""
    return f"{model.crd.plural}.{GROUP}"


def openapi_schema(model: type[Resource]) -> dict[str, Any]:
    """The kind's structural ``openAPIV3Schema``."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    raw["properties"] = {**raw["properties"], **_ROOT_FIELDS}
    raw["required"] = [name for name in raw.get("required", []) if name not in _ROOT_FIELDS]
    return structural(raw)


def crd_document(model: type[Resource]) -> dict[str, Any]:
    """The whole CRD document for ``model``."""
    info = model.crd
    columns = [*info.printer_columns, _AGE]
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
        "subresources": {"status": {}},
        "additionalPrinterColumns": [_column(column) for column in columns],
    }
    if info.selectable_fields:
        version["selectableFields"] = [{"jsonPath": path} for path in info.selectable_fields]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name(model)},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": list(info.categories),
            },
            "scope": info.scope,
            "versions": [version],
        },
    }


def _column(column: PrinterColumn) -> dict[str, Any]:
    out: dict[str, Any] = {"name": column.name, "type": column.type, "jsonPath": column.json_path}
    if column.description:
        out["description"] = column.description
    if column.priority:
        out["priority"] = column.priority
    return out
