"""`helm template` works with no flags at all; a cluster that is too old is still refused, clearly.

Chart.yaml declares no kubeVersion (Helm would check it against its offline default, v1.20.0 for this
helm, and refuse `helm template`). templates/kube-version.yaml checks instead, and only where
.Capabilities come from a cluster's discovery: that lists every kind ("v1/Namespace"), while Helm's
offline default lists group/versions only, whatever version it guesses. Here the cluster's view is
passed the way GitOps tools pass it (--kube-version with --api-versions); tests/e2e/test_helm.py shows
that real discovery lists the kinds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

HelmRun = Any  # conftest.HelmRun
MAP = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
TOO_OLD = "kubegang needs Kubernetes 1.30 or newer"
NO_MAP = "gpuRouting.enabled needs admissionregistration.k8s.io/v1 MutatingAdmissionPolicy"


def _cluster(version: str, *apis: str) -> list[str]:
    """Flags describing a cluster: its version and the kinds its discovery lists."""
    return ["--kube-version", version, *[a for api in ("v1/Namespace", *apis) for a in ("--api-versions", api)]]


def test_chart_declares_no_kube_version(chart_dir: Path) -> None:
    assert "kubeVersion" not in yaml.safe_load((chart_dir / "Chart.yaml").read_text())


def test_helm_template_without_any_flag(run_helm: HelmRun, chart_dir: Path) -> None:
    """What Argo CD and plain `helm template` do: no release name, no --kube-version, no --namespace."""
    out = run_helm("template", str(chart_dir)).stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(out) if d}
    assert {"Deployment", "DaemonSet", "CustomResourceDefinition", "MutatingAdmissionPolicy"} <= kinds


def test_helm_lint_strict_without_kube_version(run_helm: HelmRun, chart_dir: Path) -> None:
    assert "0 chart(s) failed" in run_helm("lint", str(chart_dir), "--strict").stdout


def test_offline_capabilities_list_no_kinds(run_helm: HelmRun, tmp_path: Path) -> None:
    """The signal the check relies on: Helm's offline default has no "v1/Namespace"."""
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.0.1\n")
    (chart / "templates" / "caps.yaml").write_text(
        'kinds: {{ .Capabilities.APIVersions.Has "v1/Namespace" }}\n'
        'version: {{ .Capabilities.KubeVersion.Version | quote }}\n')
    offline = yaml.safe_load(run_helm("template", str(chart)).stdout)
    # The version is Helm's guess (v1.20.0 here; client-go's minor in release builds): never trusted.
    assert offline["kinds"] is False, offline
    offline = yaml.safe_load(run_helm("template", str(chart), "--kube-version", "1.29.0").stdout)
    assert offline["kinds"] is False, "--kube-version alone must not look like a cluster"


@pytest.mark.parametrize(("version", "sets", "apis", "error"), [
    ("1.29.4", [], [MAP], TOO_OLD),
    ("1.29.4", ["gpuRouting.enabled=false"], [], TOO_OLD),
    ("1.35.2", [], [], NO_MAP),
    ("1.36.3", [], [], NO_MAP),  # 1.36 with the API turned off (--runtime-config)
    ("1.35.2", ["gpuRouting.enabled=false"], [], None),
    ("1.36.3", [], [MAP], None),
    ("1.36.3-gke.1200", [], [MAP], None),  # provider builds carry a pre-release suffix
])
def test_a_clusters_version_and_apis_are_checked(run_helm: HelmRun, chart_dir: Path, version: str,
                                                 sets: list[str], apis: list[str], error: str | None) -> None:
    args = ["template", "kg", str(chart_dir), *_cluster(version, *apis), *[a for s in sets for a in ("--set", s)]]
    proc = run_helm(*args, check=False)
    if error is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0 and error in proc.stderr, proc.stderr
        assert version.split("-")[0] in proc.stderr, "the message names the cluster's version"
