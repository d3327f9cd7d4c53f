"""A new leader's resync on a cluster without KubeRay: the API server answers the unknown ray.io
group with a plain-text 404 (lightkube raises it as httpx2.HTTPStatusError, not ApiError); that means
no RayClusters, not a failed resync (which retried forever and never admitted anything)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from kubegang.operator._cache import ClusterCache
from kubegang.operator._kube import RayClusterResource
from kubegang.operator._watches import resync_from_api


class NoKubeRay:
    def __init__(self, status: int) -> None:
        self.status = status

    def list(self, resource: Any, **_: Any) -> AsyncIterator[Any]:
        async def items() -> AsyncIterator[Any]:
            if resource is RayClusterResource:
                request = httpx2.Request("GET", "https://api/apis/ray.io/v1/rayclusters")
                raise httpx2.HTTPStatusError("404 page not found", request=request,
                                             response=httpx2.Response(self.status, request=request))
            for _ in ():
                yield None
        return items()


async def test_a_plain_404_for_rayclusters_means_none() -> None:
    cache = ClusterCache()
    await resync_from_api(NoKubeRay(404), cache)  # type: ignore[arg-type]
    assert cache.rayclusters == {}


async def test_any_other_error_still_fails_the_resync() -> None:
    with pytest.raises(httpx2.HTTPStatusError):
        await resync_from_api(NoKubeRay(500), ClusterCache())  # type: ignore[arg-type]
