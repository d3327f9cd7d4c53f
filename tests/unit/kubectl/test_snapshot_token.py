"""``kubectl gang snapshot save --extender``: an extender that checks callers (the chart's default) gets the
bearer token of --token-file, and a refusal says what to give instead of a traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kubegang.authn import ACCESS_REVIEWS, TOKEN_REVIEWS, SecureServing
from kubegang.extender._http import build_extender_app, serve
from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.kubectl._kube import ClusterError, fetch_extender_snapshot
from kubegang.tls import server_ssl_context, write_pki


class Reviews:
    """The API server's answers: token "ops" belongs to a user RBAC allows get /debug/snapshot."""

    async def create_review(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        if path == TOKEN_REVIEWS:
            return {"status": {"authenticated": body["spec"]["token"] in ("ops", "dev"),
                               "user": {"username": body["spec"]["token"]}}}
        assert path == ACCESS_REVIEWS
        return {"status": {"allowed": body["spec"]["user"] == "ops"}}


async def test_the_token_file_is_sent_and_refusals_are_explained(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    app = build_extender_app(Ledger(), ExtenderMetrics(), serving=SecureServing(), reviews=Reviews())
    site = await serve(app, "127.0.0.1", 0, server_ssl_context(pki.server_cert, pki.server_key, pki.ca_cert))
    url = f"https://127.0.0.1:{site.port}"
    (tmp_path / "ops").write_text("ops\n")
    (tmp_path / "dev").write_text("dev")
    try:
        data = await asyncio.to_thread(fetch_extender_snapshot, url, pki.ca_cert.parent, token_file=tmp_path / "ops")
        assert "nodes" in data
        for token_file, status in ((None, "401"), (tmp_path / "dev", "403")):
            with pytest.raises(ClusterError, match=f"refused \\({status}.*--token-file"):
                await asyncio.to_thread(fetch_extender_snapshot, url, pki.ca_cert.parent, token_file=token_file)
        with pytest.raises(ClusterError, match=r"--token-file .*missing"):
            await asyncio.to_thread(fetch_extender_snapshot, url, pki.ca_cert.parent,
                                    token_file=tmp_path / "missing")
    finally:
        await site.close()


async def test_the_chart_secrets_layout_and_a_port_forward_by_another_name(tmp_path: Path) -> None:
    """The chart's client Secret holds ca.crt, tls.crt, tls.key; its server certificate names only the
    Service, which a port-forward reaches as 127.0.0.1: --tls-server-name says which name to check."""
    import shutil

    service = "kg-kubegang-extender.kubegang-system.svc"
    pki = write_pki(tmp_path / "pki", server_names=[service])
    secret = tmp_path / "secret"
    secret.mkdir()
    shutil.copy(pki.ca_cert, secret / "ca.crt")
    shutil.copy(pki.ca_cert.parent / "client.crt", secret / "tls.crt")
    shutil.copy(pki.ca_cert.parent / "client.key", secret / "tls.key")
    app = build_extender_app(Ledger(), ExtenderMetrics(), serving=SecureServing(), reviews=Reviews())
    site = await serve(app, "127.0.0.1", 0, server_ssl_context(pki.server_cert, pki.server_key, pki.ca_cert))
    url = f"https://127.0.0.1:{site.port}"
    (tmp_path / "ops").write_text("ops")
    try:
        with pytest.raises(ClusterError, match="cannot fetch"):  # 127.0.0.1 is not a name it carries
            await asyncio.to_thread(fetch_extender_snapshot, url, secret, token_file=tmp_path / "ops")
        data = await asyncio.to_thread(fetch_extender_snapshot, url, secret, token_file=tmp_path / "ops",
                                       server_name=service)
        assert "nodes" in data
        (secret / "tls.key").unlink()
        with pytest.raises(ClusterError, match=r"missing .*client\.crt.*\(or tls\.crt and tls\.key\)"):
            await asyncio.to_thread(fetch_extender_snapshot, url, secret, token_file=tmp_path / "ops")
    finally:
        await site.close()


def test_tls_files_that_are_not_pem_or_do_not_match_are_named(tmp_path: Path) -> None:
    """The files of --tls-dir are checked as the processes check theirs (``kubegang._flags``) before a
    connection is tried: one line naming the file, not an ssl traceback."""
    pki = write_pki(tmp_path / "pki")
    folder = pki.ca_cert.parent
    (folder / "ca.crt").write_text("not a certificate\n")
    with pytest.raises(ClusterError, match=r"--tls-dir: .*ca\.crt holds no PEM certificate"):
        fetch_extender_snapshot("https://127.0.0.1:1", folder)
    other = write_pki(tmp_path / "other")
    (folder / "ca.crt").write_bytes(other.ca_cert.read_bytes())
    (folder / "client.key").write_bytes((other.ca_cert.parent / "client.key").read_bytes())
    mismatch = r"--tls-dir: .*client\.key is not the private key of --tls-dir .*client\.crt"
    with pytest.raises(ClusterError, match=mismatch):
        fetch_extender_snapshot("https://127.0.0.1:1", folder)
