"""The kinds kubegang defines, and manifest parsing by kind.

Adding a kind is one entry in :data:`KINDS`: write a :class:`~kubegang.api._resource.Resource`
subclass (``kind`` as a Literal, ``spec``, optional ``status``, and a ``crd = KindInfo(...)`` class
attribute with plural, short names, scope and printer columns), import it here and append it. Then
``python -m kubegang.api.crdgen`` writes ``crds/<plural>.kubegang.io.yaml`` for it, and
:func:`parse_manifest` accepts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubegang.api._common import API_VERSION
from kubegang.api._gpujob import GPUJob
from kubegang.api._gpuqueue import GPUQueue
from kubegang.api._resource import Resource
from kubegang.api.gpunode import GPUNode

KINDS: tuple[type[Resource], ...] = (GPUJob, GPUQueue, GPUNode)
"""Every kind the CRD generator writes, in file order."""


class UnknownKindError(ValueError):
    """A manifest of a kind (or apiVersion) kubegang does not define."""


def kind_model(kind: str) -> type[Resource]:
    """The model of ``kind``; :class:`UnknownKindError` lists the known kinds otherwise."""
    for model in KINDS:
        if model.crd.kind == kind:
            return model
    known = ", ".join(model.crd.kind for model in KINDS)
    raise UnknownKindError(f"kind {kind!r} is not a kubegang kind; known: {known}")


def parse_manifest(document: Mapping[str, Any]) -> Resource:
    """The model of one manifest (as loaded from YAML/JSON), validated as the API server would.

    Keys are matched by their wire (camelCase) names only, so a manifest that the API server would
    refuse for an unknown field is refused here too. Raises :class:`UnknownKindError` or pydantic's
    ``ValidationError`` (whose locations name the fields).
    """
    if document.get("apiVersion") != API_VERSION:
        raise UnknownKindError(f"apiVersion must be {API_VERSION!r}, got {document.get('apiVersion')!r}")
    model = kind_model(str(document.get("kind")))
    return model.model_validate(document, by_alias=True, by_name=False)
