"""KubeApi keeps at most ``max_in_flight`` calls under way (the HTTP pool's keep-alive size, so a
64-pod gang opens no connection that is closed after one call), and a call that waited for its turn
asks the leader's fence when it goes out, not when it started waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kubegang.operator._kube import KubeApi, RateLimiter
from kubegang.operator._leader import NotLeading


class SlowClient:
    """Counts calls under way; each takes until ``release`` is set."""

    def __init__(self) -> None:
        self.under_way = 0
        self.most = 0
        self.sent = 0
        self.release = asyncio.Event()

    async def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        self.under_way += 1
        self.most = max(self.most, self.under_way)
        self.sent += 1
        try:
            await self.release.wait()
        finally:
            self.under_way -= 1
        return body


def pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}", "namespace": "ns"}}


async def test_no_more_than_max_in_flight_calls_are_under_way() -> None:
    client = SlowClient()
    kube = KubeApi(client, RateLimiter(qps=10_000, burst=1_000), max_in_flight=4)  # type: ignore[arg-type]
    calls = [asyncio.create_task(kube.create(pod(i))) for i in range(64)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert client.under_way == 4
    client.release.set()
    assert all(await asyncio.gather(*calls))
    assert client.most == 4 and client.sent == 64


async def test_a_call_that_waited_for_its_turn_is_fenced_when_it_goes_out() -> None:
    client = SlowClient()
    leading = [True]
    kube = KubeApi(client, RateLimiter(qps=10_000, burst=1_000), fence=lambda: leading[0],  # type: ignore[arg-type]
                   max_in_flight=1)
    first = asyncio.create_task(kube.create(pod(0)))
    waiting = asyncio.create_task(kube.create(pod(1)))
    for _ in range(10):
        await asyncio.sleep(0)
    leading[0] = False                 # the Lease is lost while the second call waits for a slot
    client.release.set()
    assert await first
    with pytest.raises(NotLeading):
        await waiting
    assert client.sent == 1


async def test_a_call_still_in_flight_at_the_renew_deadline_is_abandoned_unless_the_lease_was_renewed() -> None:
    """A deposed leader's write must not land after the new leader took over: at the deadline a call not
    yet answered is cancelled (its connection closed, which cancels it on the API server too). A renewal
    meanwhile moves the deadline, and the call goes on."""
    client = SlowClient()
    deadline = [asyncio.get_running_loop().time() + 0.1]

    def time_left() -> float:
        return max(0.0, deadline[0] - asyncio.get_running_loop().time())

    kube = KubeApi(client, RateLimiter(qps=10_000, burst=1_000),  # type: ignore[arg-type]
                   fence=lambda: time_left() > 0)
    kube.time_left = time_left
    with pytest.raises(NotLeading, match="abandoned in flight"):
        await asyncio.wait_for(kube.create(pod(0)), 10)  # the API server never answers
    assert client.under_way == 0 and client.sent == 1

    deadline[0] = asyncio.get_running_loop().time() + 0.1
    call = asyncio.create_task(kube.create(pod(1)))
    for _ in range(3):  # renewed every 0.05 s, as the elector renews well inside its deadline
        await asyncio.sleep(0.05)
        deadline[0] = asyncio.get_running_loop().time() + 0.1
    client.release.set()
    assert await asyncio.wait_for(call, 10)
