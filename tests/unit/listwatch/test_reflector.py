"""The reflector's own rules: one object its sink cannot take does not stop the stream, a relist sends
the deletion of what vanished as the stub it kept (not the body), and an unselected optional collection's
404 is 'not served', a 404 of a required one an error."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from kubegang.listwatch import Collection, NotServed, Reflector, list_collection, name_of

pytestmark = pytest.mark.asyncio(loop_scope="function")


def _node(name: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": {"a": "b"}},
            "spec": {"podCIDR": "10.0.0.0/24"}, "status": {"capacity": {"cpu": "128"}}}


def _client(handler: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler), base_url="https://api")


async def test_a_sink_that_fails_on_one_object_does_not_stop_the_stream() -> None:
    events = [{"type": "ADDED", "object": _node(n, str(i + 11))} for i, n in enumerate(["a", "bad", "c"])]

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content="\n".join(json.dumps(e) for e in events).encode())

    seen: list[str] = []

    def sink(kind: str, obj: dict[str, Any]) -> None:
        if name_of(obj) == "bad":
            raise KeyError("spec.whatever")
        seen.append(name_of(obj))

    reflector = Reflector(_client(handler), Collection("nodes", "/api/v1/nodes", name_of), sink)
    assert await reflector.watch_once("10") == "13"
    assert seen == ["a", "c"]


async def test_a_relist_sends_the_deletion_of_what_vanished_as_its_stub() -> None:
    items = [_node("a"), _node("b")]

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json={"items": items, "metadata": {"resourceVersion": "5"}})

    sent: list[tuple[str, dict[str, Any]]] = []
    reflector = Reflector(_client(handler), Collection("nodes", "/api/v1/nodes", name_of),
                          lambda kind, obj: sent.append((kind, obj)))
    assert await reflector.relist() == "5"
    assert [(k, name_of(o)) for k, o in sent] == [("ADDED", "a"), ("ADDED", "b")]
    items.pop()
    sent.clear()
    await reflector.relist()
    assert [(k, name_of(o)) for k, o in sent] == [("DELETED", "b"), ("MODIFIED", "a")]
    assert sent[0][1] == {"metadata": {"name": "b", "labels": {"a": "b"}}}


async def test_a_404_is_not_served_only_for_an_optional_collection() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(404, text="404 page not found")

    client = _client(handler)
    with pytest.raises(NotServed):
        await list_collection(client, Collection("rayclusters", "/apis/ray.io/v1/rayclusters", optional=True))
    with pytest.raises(httpx2.HTTPStatusError):
        await list_collection(client, Collection("nodes", "/api/v1/nodes", name_of))


def _fast() -> Any:
    from kubegang.backoff import Backoff
    return Backoff(initial_seconds=0.05, max_seconds=0.05)


async def test_a_list_failing_for_any_reason_is_retried_not_the_end_of_the_feed() -> None:
    """A body that is not a list (or a credential plugin failing) used to end the whole feed: a replica
    waiting for its first lists then held the Lease and admitted nothing, for ever."""
    answers = [httpx2.Response(200, json=[]), httpx2.Response(200, json={"items": [_node("a")],
                                                                         "metadata": {"resourceVersion": "7"}})]

    def handler(request: httpx2.Request) -> httpx2.Response:
        return answers.pop(0)

    sent: list[str] = []
    reflector = Reflector(_client(handler), Collection("nodes", "/api/v1/nodes", name_of),
                          lambda kind, obj: sent.append(name_of(obj)), backoff=_fast)
    assert await reflector.synced() == "7"
    assert sent == ["a"] and answers == []


class _Reset(httpx2.AsyncByteStream):
    """One event, then the connection is reset."""

    def __init__(self, event: dict[str, Any]) -> None:
        self.event = event

    async def __aiter__(self) -> Any:
        yield json.dumps(self.event).encode() + b"\n"
        raise httpx2.ReadError("connection reset")


async def test_a_watch_broken_mid_stream_resumes_from_the_last_version_it_delivered() -> None:
    import asyncio

    versions: list[str] = []
    done = asyncio.Event()

    def handler(request: httpx2.Request) -> httpx2.Response:
        versions.append(request.url.params["resourceVersion"])
        if len(versions) == 1:
            return httpx2.Response(200, stream=_Reset({"type": "MODIFIED", "object": _node("a", "12")}))
        done.set()
        return httpx2.Response(200, content=b"")

    reflector = Reflector(_client(handler), Collection("nodes", "/api/v1/nodes", name_of),
                          lambda kind, obj: None, backoff=_fast)
    task = asyncio.create_task(reflector.follow("11"))
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert versions[:2] == ["11", "12"]  # was ["11", "11"]: every event since replayed


async def test_a_watch_that_closes_at_once_with_nothing_in_it_is_retried_after_a_backoff() -> None:
    import asyncio

    watches = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal watches
        watches += 1
        return httpx2.Response(200, content=b"")

    reflector = Reflector(_client(handler), Collection("nodes", "/api/v1/nodes", name_of),
                          lambda kind, obj: None, backoff=_fast)
    task = asyncio.create_task(reflector.follow("11"))
    await asyncio.sleep(0.5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert 2 <= watches <= 50  # about 0.05 s apart (jittered); reconnecting at once made thousands a second


async def test_a_silent_watch_stream_is_taken_as_broken_and_reopened_from_its_last_version() -> None:
    """A connection that died without a FIN or RST keeps a stream silent for ever; the API server sends a
    live stream a bookmark about every minute, so silence past the read timeout is a failure: counted
    as one (``stale_for``) and reopened from the last version delivered. A real loopback server, since
    the timeout is the transport's."""
    import asyncio

    from aiohttp import web

    versions: list[str] = []
    failing_when_reopened: list[bool] = []
    reopened = asyncio.Event()
    reflectors: list[Reflector] = []

    async def watch(request: web.Request) -> web.StreamResponse:
        versions.append(request.query["resourceVersion"])
        if len(versions) > 1:
            failing_when_reopened.append(reflectors[0].failing_since is not None)
            reopened.set()
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(json.dumps({"type": "MODIFIED", "object": _node("a", "12")}).encode() + b"\n")
        await asyncio.sleep(30)  # then silence, as a dead peer
        return response

    app = web.Application()
    app.router.add_get("/api/v1/nodes", watch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}")
    reflector = Reflector(client, Collection("nodes", "/api/v1/nodes", name_of), lambda kind, obj: None,
                          backoff=_fast, read_timeout_seconds=0.3)
    reflectors.append(reflector)
    task = asyncio.create_task(reflector.follow("11"))
    try:
        await asyncio.wait_for(reopened.wait(), 10)
        assert failing_when_reopened[0]  # counted as failing until the reopened stream delivers
        assert versions[:2] == ["11", "12"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
        await runner.cleanup()


async def test_the_read_timeout_outlasts_the_api_servers_bookmark_period() -> None:
    from kubegang.listwatch import WATCH_READ_TIMEOUT_SECONDS, WATCH_TIMEOUT_SECONDS

    # Bookmarks come about every 60 s (k8s.io/apiserver's defaultBookmarkFrequency); the stream's own
    # server-side end comes with a bookmark 2 s before it.
    assert 60 < WATCH_READ_TIMEOUT_SECONDS < WATCH_TIMEOUT_SECONDS
