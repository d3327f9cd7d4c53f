"""The one scheduler configuration renders to what kube-scheduler needs for the extender."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubegang.extender.scheduler_config import SchedulerConfigValues, render_scheduler_config

VALUES = SchedulerConfigValues(
    extender_url="https://127.0.0.1:9443", ca_file="/pki/ca.crt", cert_file="/pki/client.crt",
    key_file="/pki/client.key", kubeconfig="/tmp/kc", leader_elect=False,
)


def test_renders_the_kubegang_profile_and_extender() -> None:
    cfg = yaml.safe_load(render_scheduler_config(VALUES))
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["kubegang"]
    assert cfg["clientConnection"]["kubeconfig"] == "/tmp/kc"
    assert cfg["leaderElection"]["leaderElect"] is False
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "https://127.0.0.1:9443"
    verbs = (ext["filterVerb"], ext["prioritizeVerb"], ext["preemptVerb"])
    assert verbs == ("filter", "prioritize", "preempt")
    assert "bindVerb" not in ext
    assert ext["enableHTTPS"] is True and ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    assert ext["tlsConfig"] == {"serverName": "127.0.0.1", "caFile": "/pki/ca.crt",
                                "certFile": "/pki/client.crt", "keyFile": "/pki/client.key"}
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]


def test_plain_http_is_refused() -> None:
    with pytest.raises(ValueError, match="mTLS only"):
        render_scheduler_config(SchedulerConfigValues("http://x:1", "a", "b", "c"))


def test_a_template_with_an_unknown_placeholder_is_refused(tmp_path: Path) -> None:
    from kubegang.extender.scheduler_config import TEMPLATE

    bad = tmp_path / "t.yaml"
    bad.write_text(TEMPLATE.read_text() + "extra: \"@@TYPO@@\"\n")
    with pytest.raises(ValueError, match="TYPO"):
        render_scheduler_config(VALUES, bad)
