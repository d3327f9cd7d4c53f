"""Hostile input and hostile clients at the HTTPS listener: every request answered, nobody crashes it,
and only clients holding a certificate from our CA get in."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubegang.extender._http import RunningSite
from kubegang.tls import PemPaths, client_ssl_context

VERBS = ["/filter", "/prioritize", "/preempt"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children,
                                                                       max_size=4),
    max_leaves=20,
)
pod_like = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={
            "name": json_values, "uid": json_values, "annotations": json_values, "labels": json_values}),
        "spec": st.fixed_dictionaries({}, optional={
            "containers": st.lists(st.fixed_dictionaries({}, optional={"resources": st.fixed_dictionaries(
                {}, optional={"limits": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]),
                                                        json_values, max_size=2)})}), max_size=3),
            "nodeSelector": json_values}),
    },
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({}, optional={
        "Pod": pod_like | json_values, "NodeNames": st.lists(json_values, max_size=5) | json_values,
        "Nodes": json_values | st.fixed_dictionaries({"items": st.lists(
            st.fixed_dictionaries({}, optional={"metadata": json_values}), max_size=3)}),
        "NodeNameToMetaVictims": json_values, "NodeNameToVictims": json_values,
    }).map(lambda v: json.dumps(v).encode()),
)


def _client(pki: PemPaths) -> httpx.Client:
    return httpx.Client(verify=client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key), timeout=10)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verb=st.sampled_from(VERBS), body=bodies)
def test_fuzzed_bodies_are_always_answered_without_5xx(
    threaded_https: tuple[RunningSite, Any], pki: PemPaths, verb: str, body: bytes
) -> None:
    site, _ = threaded_https
    with _client(pki) as client:
        resp = client.post(f"https://127.0.0.1:{site.port}{verb}", content=body)
        assert resp.status_code in (200, 400, 413), resp.text
        if resp.status_code != 200:
            assert resp.text.strip(), "a refusal must carry a message"
        alive = client.post(f"https://127.0.0.1:{site.port}/filter",
                            json={"Pod": {}, "NodeNames": ["a"]})
        assert alive.status_code == 200


def _get(site: RunningSite, ctx: ssl.SSLContext | None, scheme: str = "https") -> Any:
    with httpx.Client(verify=ctx if ctx is not None else False, timeout=5) as client:
        return client.get(f"{scheme}://127.0.0.1:{site.port}/debug/snapshot")


def test_right_client_certificate_is_accepted(
    threaded_https: tuple[RunningSite, Any], pki: PemPaths
) -> None:
    resp = _get(threaded_https[0], client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key))
    assert resp.status_code == 200
    assert resp.json()["fake"] is True


def test_plain_http_is_refused(threaded_https: tuple[RunningSite, Any]) -> None:
    with pytest.raises(httpx.HTTPError):
        _get(threaded_https[0], None, scheme="http")


def test_no_client_certificate_is_refused(
    threaded_https: tuple[RunningSite, Any], pki: PemPaths
) -> None:
    with pytest.raises(httpx.HTTPError):
        _get(threaded_https[0], client_ssl_context(pki.ca_cert))


def test_client_certificate_from_unknown_ca_is_refused(
    threaded_https: tuple[RunningSite, Any], pki: PemPaths, other_pki: PemPaths
) -> None:
    with pytest.raises(httpx.HTTPError):
        _get(threaded_https[0], client_ssl_context(pki.ca_cert, other_pki.client_cert, other_pki.client_key))


def test_expired_client_certificate_is_refused(
    threaded_https: tuple[RunningSite, Any], pki: PemPaths, expired_client: tuple[Path, Path],
    unexpired_twin: tuple[Path, Path],
) -> None:
    with pytest.raises(httpx.HTTPError):
        _get(threaded_https[0], client_ssl_context(pki.ca_cert, *expired_client))
    assert _get(threaded_https[0], client_ssl_context(pki.ca_cert, *unexpired_twin)).status_code == 200, \
        "the same certificate, not yet expired, is accepted: the expiry is what is refused"
