"""A pod's annotation in digits that are not ASCII ones never stops the extender.

``"²".isdigit()`` is True and ``int("²")`` raises ValueError: one pod in any namespace annotated
``kubegang.io/gpus: "²"`` made the initial list raise, the extender exit, and GPU scheduling stop for
the whole cluster. Such an annotation is now what any other unreadable annotation of ours is: refused
by name (the pod's GPU request still counted), and ``filter`` answers that pod with the annotation named.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from kubegang.extender import _holds, _ledger_state
from kubegang.extender._http import build_extender_app, filter_answer, serve
from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._pods import DemandError, pod_demand
from kubegang.extender._watch import ClusterFeed
from kubegang.extender._wire import ExtenderArgs, Pod

from .test_ledger import free, make, node, pod

BAD_NUMBERS = ["²", "0,²", "١", "3\u0663", "1" * 5000]
"""Superscript two, Arabic-Indic one, a digit after an ASCII one, and a number too long for ``int()``."""


def _with(obj: dict[str, Any], annotations: dict[str, str] | None = None,
          labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj["metadata"]["annotations"].update(annotations or {})
    obj["metadata"]["labels"].update(labels or {})
    return obj


@pytest.mark.parametrize("text", BAD_NUMBERS)
@pytest.mark.parametrize("key, where", [("kubegang.io/gpus", "annotations"), ("kubegang.io/gpu-milli", "annotations"),
                                        ("kubegang.io/replica-index", "labels")])
def test_a_number_that_is_not_ascii_digits_is_refused_with_its_key_named(key: str, where: str, text: str) -> None:
    obj = pod("u", 0, pinned="n0", job="J")
    if key == "kubegang.io/gpu-milli":
        obj = _with(obj, {"kubegang.io/gpus": "0"})
    obj["metadata"][where][key] = text
    with pytest.raises(DemandError, match=key):
        pod_demand(Pod.model_validate(obj))


def test_ascii_numbers_still_read() -> None:
    obj = _with(pod("u", 0, pinned="n0", job="J", index=3), {"kubegang.io/gpus": " 4, 5 ",
                                                              "kubegang.io/gpu-milli": ""})
    got = pod_demand(Pod.model_validate(obj))
    assert got.pinned_gpus == (4, 5) and got.pod_index == 3


def _cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node("n0"), node("n1")]
    pods = [
        _with(pod("no-gpus", 0), {"kubegang.io/gpus": "²"}),                      # any pod, any namespace
        _with(pod("share", 0), {"kubegang.io/gpu-milli": "¹"}),
        _with(pod("bound", 4, node_name="n0"), {"kubegang.io/gpus": "0,1,2,²"}),  # still holds 4 GPUs
        pod("good", 2, node_name="n1", gpu_idx="6,7"),
    ]
    return nodes, pods


def test_the_initial_list_reads_every_pod_and_counts_a_bound_pods_request() -> None:
    nodes, pods = _cluster()
    ledger = Ledger()
    ledger.replace_all(nodes, {}, pods, [])
    assert free(ledger) == {"n0": 4, "n1": 6}
    assert sorted(ledger.snapshot()["pods"]) == ["bound", "good"]


def test_a_watch_event_of_such_a_pod_is_read_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    ledger = make(1)
    for obj in _cluster()[1][:3]:
        ledger.upsert_pod(obj)
    assert free(ledger) == {"n0": 4}
    assert "pod ns/p-no-gpus: annotation kubegang.io/gpus: expected comma-separated GPU indices" in caplog.text


def test_one_pod_the_reader_fails_on_does_not_stop_the_list(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    nodes, pods = _cluster()
    original = _holds._read_pod

    def broken(obj: Any) -> Any:
        if obj["metadata"]["uid"] == "bound":
            raise RuntimeError("a bug for one object")
        return original(obj)

    monkeypatch.setattr(_ledger_state, "_read_pod", broken)
    ledger = Ledger()
    ledger.replace_all(nodes, {}, pods, [])
    assert free(ledger) == {"n0": 8, "n1": 6}
    assert "pod ns/p-bound: not read at sync" in caplog.text


def test_filter_answers_such_a_pod_with_the_annotation_named() -> None:
    args = ExtenderArgs.model_validate({"Pod": _cluster()[1][0], "NodeNames": ["n0"]})
    answer = filter_answer(make(1), args)
    assert answer["Error"].startswith("annotation kubegang.io/gpus: expected comma-separated GPU indices")
    assert "'²'" in answer["Error"]


@pytest.mark.asyncio(loop_scope="session")
async def test_filter_over_http_is_200_with_the_error_not_500() -> None:
    site = await serve(build_extender_app(make(1), ExtenderMetrics()), "127.0.0.1", 0)
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{site.port}") as client:
            for obj in _cluster()[1][:2]:
                resp = await client.post("/filter", content=json.dumps({"Pod": obj, "NodeNames": ["n0"]}))
                assert resp.status_code == 200, resp.text
                assert "kubegang.io/gpu" in resp.json()["Error"]
    finally:
        await site.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_feed_syncs_past_such_a_pod() -> None:
    nodes, pods = _cluster()

    def handler(request: httpx2.Request) -> httpx2.Response:
        items = {"/api/v1/nodes": nodes, "/api/v1/pods": pods}.get(request.url.path, [])
        return httpx2.Response(200, json={"items": items, "metadata": {"resourceVersion": "1"}})

    ledger = Ledger()
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler), base_url="https://api") as client:
        await ClusterFeed(client, ledger, ExtenderMetrics()).initial_sync()
    assert ledger.synced and free(ledger) == {"n0": 4, "n1": 6}
