"""A Kopf diff-base storage for an operator whose handlers are all ``@kopf.on.event``.

For every watch event Kopf builds the object's "essence" (a deep copy of the body without status and
most metadata) and diffs it against the stored one, to find changes for ``on.create`` / ``on.update``
/ ``on.field`` handlers and daemons. The cache-feeding handlers (``_watches``) are event handlers
only, which get the raw event and never look at that diff; yet the copy ran on each of the burst's
tens of thousands of pod and job events: a py-spy profile of the leader during a 500-job burst put
13% of its CPU in ``_detect_causes`` -> ``DiffBaseStorage.build`` -> ``copy.deepcopy``.

This storage builds an empty essence and stores none, so the diff is always empty. It would hide
every change from change handlers: ``_watches.build_registry`` registers none, and a unit test keeps
it so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kopf


class EventsOnlyDiffBase(kopf.DiffBaseStorage):
    """No essence: for registries with event handlers only (see the module docstring)."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None
