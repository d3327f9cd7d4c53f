"""The HTTPS verbs as kube-scheduler sees them: shapes, refusals with messages, metrics, uptime."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from kubegang.extender._http import RunningSite
from kubegang.tls import PemPaths, client_ssl_context

pytestmark = pytest.mark.asyncio(loop_scope="session")

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
}


async def _post(site: RunningSite, pki: PemPaths, path: str, body: bytes | Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    ctx = client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key)
    async with aiohttp.ClientSession() as session, session.post(
        f"https://127.0.0.1:{site.port}{path}", data=data, ssl=ctx,
        headers={"Content-Type": "application/json"},
    ) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except json.JSONDecodeError:
            return resp.status, text


async def test_filter_node_names(https_site: RunningSite, pki: PemPaths) -> None:
    status, body = await _post(https_site, pki, "/filter", {"Pod": POD, "NodeNames": ["a", "full-1", "b"]})
    assert status == 200
    assert body == {"NodeNames": ["a", "b"], "FailedNodes": {"full-1": "needs 2 GPUs, 0 free"},
                    "FailedAndUnresolvableNodes": {}, "Error": ""}


async def test_filter_pinned_pod_is_unresolvable_elsewhere(https_site: RunningSite, pki: PemPaths) -> None:
    pod = json.loads(json.dumps(POD))
    pod["metadata"]["annotations"] = {"kubegang.io/node": "b"}
    status, body = await _post(https_site, pki, "/filter", {"Pod": pod, "NodeNames": ["a", "b"]})
    assert status == 200
    assert body["NodeNames"] == ["b"]
    assert body["FailedAndUnresolvableNodes"] == {"a": "pod is planned on b"}


async def test_filter_node_list_answers_with_nodes(https_site: RunningSite, pki: PemPaths) -> None:
    nodes = {"items": [{"metadata": {"name": "a"}, "status": {"x": 1}}, {"metadata": {"name": "full-2"}},
                       {"metadata": 5}, {"kind": "Node"}]}
    status, body = await _post(https_site, pki, "/filter", {"Pod": POD, "Nodes": nodes})
    assert status == 200
    assert "NodeNames" not in body
    assert body["Nodes"]["items"] == [{"metadata": {"name": "a"}, "status": {"x": 1}}]


async def test_filter_bad_pod_field_comes_back_as_error(https_site: RunningSite, pki: PemPaths) -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}
    status, body = await _post(https_site, pki, "/filter", {"Pod": pod, "NodeNames": ["a"]})
    assert status == 200
    assert "spec.containers[0].resources" in body["Error"]
    assert "NodeNames" not in body or not body["NodeNames"]


async def test_prioritize(https_site: RunningSite, pki: PemPaths) -> None:
    status, body = await _post(https_site, pki, "/prioritize", {"Pod": POD, "NodeNames": ["ab", "abcd"]})
    assert status == 200
    assert body == [{"Host": "ab", "Score": 2}, {"Host": "abcd", "Score": 4}]


async def test_preempt_keeps_num_pdb_violations_and_drops_refused_nodes(
    https_site: RunningSite, pki: PemPaths
) -> None:
    victims = {"n1": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 2}, "gang-n": {"Pods": [{"UID": "g"}]}}
    status, body = await _post(https_site, pki, "/preempt", {"Pod": POD, "NodeNameToMetaVictims": victims})
    assert status == 200
    assert body == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 2}}}


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b"", 400, "empty request body"),
        (b"[1, 2]", 400, "invalid request"),
        ({"Pod": POD, "NodeNames": 5}, 400, "NodeNames"),
        ({"Pod": "x"}, 400, "Pod"),
        ({"NodeNames": ["a"]}, 400, "Pod: Field required"),
        ({"Pod": POD, "NodeNames": ["a" * 70_000]}, 413, "too large"),
    ],
)
async def test_bad_requests_get_4xx_with_a_message(
    https_site: RunningSite, pki: PemPaths, body: Any, status: int, needle: str
) -> None:
    got, text = await _post(https_site, pki, "/filter", body)
    assert got == status
    assert needle in text
    ok, _ = await _post(https_site, pki, "/filter", {"Pod": POD, "NodeNames": ["a"]})
    assert ok == 200


async def test_authority_bug_is_a_500_and_the_server_stays_up(
    https_site: RunningSite, pki: PemPaths, authority: Any
) -> None:
    authority.boom = True
    status, text = await _post(https_site, pki, "/prioritize", {"Pod": POD, "NodeNames": ["a"]})
    assert status == 500
    assert "prioritize" in text
    authority.boom = False
    status, _ = await _post(https_site, pki, "/prioritize", {"Pod": POD, "NodeNames": ["a"]})
    assert status == 200


async def test_debug_snapshot(https_site: RunningSite, pki: PemPaths) -> None:
    ctx = client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key)
    async with aiohttp.ClientSession() as s, s.get(
        f"https://127.0.0.1:{https_site.port}/debug/snapshot", ssl=ctx
    ) as resp:
        assert resp.status == 200
        assert (await resp.json())["fake"] is True


async def test_health_and_metrics_on_the_plain_port(
    https_site: RunningSite, health_site: RunningSite, pki: PemPaths
) -> None:
    await _post(https_site, pki, "/filter", {"Pod": POD, "NodeNames": ["a"]})
    await _post(https_site, pki, "/filter", b"{")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{health_site.port}/healthz") as resp:
            assert resp.status == 200
        async with s.get(f"http://127.0.0.1:{health_site.port}/metrics") as resp:
            text = await resp.text()
    assert 'kubegang_extender_requests_total{code="200",verb="filter"} 1.0' in text
    assert 'kubegang_extender_requests_total{code="400",verb="filter"} 1.0' in text
    assert 'kubegang_extender_errors_total{kind="bad_request",verb="filter"} 1.0' in text
    assert 'kubegang_extender_request_duration_seconds_count{verb="filter"} 2.0' in text
