"""The operator's and the agent's metrics listeners use kubegang.authn: HTTPS and token checks by default,
plain HTTP with --metrics-auth=off, health open to kubelet either way (the extender: tests/unit/extender)."""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from kubegang.agent._server import make_app, start_server
from kubegang.authn import MetricsAuth, SecureServing, add_serving_flags, serving_from_args
from kubegang.operator.__main__ import parser as operator_parser
from kubegang.operator._metrics_server import start_metrics
from kubegang.testing import free_port, unanswered_kubeconfig


def _kubeconfig(tmp_path: Path) -> str:
    """A kubeconfig whose API server nobody answers: only token-less requests are made."""
    return str(unanswered_kubeconfig(tmp_path / "kubeconfig"))


async def test_operator_metrics_are_https_and_refuse_a_scrape_without_a_token(tmp_path: Path) -> None:
    site = start_metrics(0, SecureServing(), _kubeconfig(tmp_path), host="127.0.0.1")
    async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{site.port}/metrics", ssl=False) as resp:
        assert resp.status == 401


async def test_operator_metrics_with_auth_off_are_plain_http() -> None:
    site = start_metrics(0, SecureServing(auth=MetricsAuth.OFF), None, host="127.0.0.1")
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{site.port}/metrics") as resp:
        assert resp.status == 200
        assert "kubegang_operator_is_leader" in await resp.text()


def test_operator_flags_default_to_auth_on() -> None:
    args = operator_parser().parse_args(["--extender-address", "x:1"])
    assert serving_from_args(args).auth is MetricsAuth.ON
    off = operator_parser().parse_args(["--extender-address", "x:1", "--metrics-auth", "off"])
    assert serving_from_args(off).auth is MetricsAuth.OFF


async def test_agent_health_stays_open_while_metrics_need_a_token(tmp_path: Path) -> None:
    from kubegang.authn import kube_review_api

    serving = SecureServing()
    app: web.Application = make_app(CollectorRegistry(), lambda: True, serving, kube_review_api(_kubeconfig(tmp_path)))
    port = free_port()
    runner = await start_server(app, "127.0.0.1", port, serving.ssl_context())
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"https://127.0.0.1:{port}/healthz", ssl=False) as resp:
                assert resp.status == 200
            async with s.get(f"https://127.0.0.1:{port}/metrics", ssl=False) as resp:
                assert resp.status == 401
    finally:
        await runner.cleanup()


def test_the_flags_work_in_an_argument_group_and_a_half_pair_is_refused(tmp_path: Path) -> None:
    group = argparse.ArgumentParser()
    add_serving_flags(group.add_argument_group("tuning"))  # as the agent adds them
    with pytest.raises(ValueError, match="--metrics-tls-cert and --metrics-tls-key"):
        serving_from_args(group.parse_args(["--metrics-tls-key", str(tmp_path)]))
