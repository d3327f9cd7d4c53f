"""The Kopf handlers that feed the cache run on the event loop: Kopf runs plain functions in a
thread pool, where they would race the leader's loop over the cache's dicts and set its
asyncio.Event from a foreign thread."""

from __future__ import annotations

import inspect

from kubegang.operator._cache import ClusterCache
from kubegang.operator._watches import build_registry


def handlers() -> dict[str, object]:
    registry = build_registry(ClusterCache(), kubeconfig=None, api_timeout_seconds=5)
    # Kopf exposes no public listing of a registry's handlers.
    return {h.id.rsplit(".", 1)[-1]: h.fn for h in registry._watching.get_all_handlers()}


def test_every_cache_feeding_handler_is_a_coroutine_function() -> None:
    found = handlers()
    assert set(found) == {"job_event", "queue_event", "pod_event", "node_event", "priority_event",
                          "raycluster_event", "group_pod_event", "ray_pod_event", "podgroup_event",
                          "workload_event", "scheduling_group_pod_event"}
    assert [name for name, fn in found.items() if not inspect.iscoroutinefunction(fn)] == []


async def test_a_queue_event_updates_the_cache_and_wakes_the_leader_loop() -> None:
    cache = ClusterCache()
    registry = build_registry(cache, kubeconfig=None, api_timeout_seconds=5)
    fn = next(h.fn for h in registry._watching.get_all_handlers() if h.id.endswith("queue_event"))
    cache.wake.clear()
    body = {"metadata": {"name": "team-a"}, "spec": {"resources": [{"flavor": "nvidia.com/gpu", "nominal": 8}]}}
    await fn(type="ADDED", body=body, name="team-a")
    assert "team-a" in cache.queues and cache.wake.is_set()
    await fn(type="DELETED", body=body, name="team-a")
    assert "team-a" not in cache.queues


def test_kopf_retries_its_api_requests_with_jittered_backoff() -> None:
    """Kopf's watch requests retry through settings.networking.error_backoffs: ours, jittered."""
    import kopf

    from kubegang.backoff import RetrySchedule

    registry = build_registry(ClusterCache(), kubeconfig=None, api_timeout_seconds=5)
    configure = next(h.fn for h in registry._activities.get_all_handlers() if h.id.endswith("configure"))
    settings = kopf.OperatorSettings()
    configure(settings=settings)
    schedule = settings.networking.error_backoffs
    assert isinstance(schedule, RetrySchedule)
    walks = [list(schedule) for _ in range(3)]
    assert all(len(w) == 8 and max(w) <= 21.0 and w[0] <= 1.0 for w in walks)
    assert walks[0] != walks[1] != walks[2], "every failing request draws its own delays"
