"""Kopf builds no per-event essence for the cache-feeding registry: it has event handlers only, so
the empty diff the EventsOnlyDiffBase storage yields can hide no change from any handler."""

from __future__ import annotations

import kopf

from kubegang.operator._cache import ClusterCache
from kubegang.operator._kopf_essence import EventsOnlyDiffBase
from kubegang.operator._watches import build_registry


def configured_settings() -> tuple[kopf.OperatorRegistry, kopf.OperatorSettings]:
    registry = build_registry(ClusterCache(), kubeconfig=None, api_timeout_seconds=5)
    configure = next(h.fn for h in registry._activities.get_all_handlers() if h.id.endswith("configure"))
    settings = kopf.OperatorSettings()
    configure(settings=settings)
    return registry, settings


def test_the_registry_uses_the_events_only_storage() -> None:
    _, settings = configured_settings()
    assert isinstance(settings.persistence.diffbase_storage, EventsOnlyDiffBase)


def test_the_registry_has_no_handler_that_reads_a_diff() -> None:
    """Change handlers (on.create/update/field/delete) and daemons would see no change at all."""
    registry, _ = configured_settings()
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []
    assert list(registry._watching.get_all_handlers()), "the cache is fed by event handlers"


def test_an_essence_is_empty_and_nothing_is_stored() -> None:
    storage = EventsOnlyDiffBase()
    body = kopf.Body({"metadata": {"name": "j", "annotations": {"a": "b"}}, "spec": {"replicas": 64}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch
