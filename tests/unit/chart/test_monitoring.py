"""Alert rules and the dashboard use only metrics the code registers; docs/metrics.md lists exactly
those; promtool accepts the rules, both as the file and as the chart's PrometheusRule renders them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from kubegang.agent._metrics import AgentMetrics
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.operator._metrics import REGISTRY as OPERATOR_REGISTRY

Render = Any  # conftest.Render
REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "kubegang"
RULES = CHART / "rules" / "kubegang-alerts.yaml"
DASHBOARD = CHART / "dashboards" / "kubegang.json"
# Series Prometheus itself adds; not kubegang's to register.
PROMETHEUS_SERIES = {"up"}
_METRIC = re.compile(r"\b(kubegang_[a-z0-9_]+|up)\b")


def _families(registry: CollectorRegistry) -> dict[str, str]:
    """Family name as exposed (counters with _total) → type."""
    out = {}
    for family in registry.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        out[name] = family.type
    return out


def _exposed() -> dict[str, str]:
    families: dict[str, str] = {}
    for registry in (OPERATOR_REGISTRY, ExtenderMetrics().registry, AgentMetrics().registry):
        families |= _families(registry)
    return families


def _series_names(families: dict[str, str]) -> set[str]:
    names = set()
    for name, kind in families.items():
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]


def rule_queries() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(r["alert"], r["expr"]) for g in groups for r in g["rules"]]


@pytest.mark.parametrize(("where", "expr"), dashboard_queries() + rule_queries())
def test_queries_use_registered_metrics(where: str, expr: str) -> None:
    known = _series_names(_exposed()) | PROMETHEUS_SERIES
    used = set(_METRIC.findall(expr))
    assert used, f"{where}: no kubegang metric in {expr!r}"
    assert used <= known, f"{where}: {sorted(used - known)} are not registered by any kubegang process"


def _registered() -> dict[str, tuple[str, tuple[str, ...], str]]:
    """Exposed name → (type, label names, process), from the collectors each process registers (an empty
    labelled metric has no samples, so its labels are read from the collector)."""
    out: dict[str, tuple[str, tuple[str, ...], str]] = {}
    for process, registry in (("operator", OPERATOR_REGISTRY), ("extender", ExtenderMetrics().registry),
                              ("agent", AgentMetrics().registry)):
        for collector in list(registry._collector_to_names):
            kind = collector._type  # type: ignore[attr-defined]
            name = collector._name + "_total" if kind == "counter" else collector._name  # type: ignore[attr-defined]
            out[name] = (kind, tuple(collector._labelnames), process)  # type: ignore[attr-defined]
    return out


def test_docs_list_exactly_the_registered_metrics() -> None:
    """docs/metrics.md's "Exposed" table: every metric the code registers and no other, with its type,
    its labels (in order) and the process that serves it."""
    text = (REPO / "docs" / "metrics.md").read_text()
    exposed_section = text.split("## Exposed", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(kubegang_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \| (\w+) \|", exposed_section, flags=re.M)
    documented = {name: (kind, tuple(re.findall(r"`(\w+)`", labels)), process)
                  for name, kind, labels, process in rows}
    assert documented == _registered()
    assert {name: kind for name, (kind, _, _) in documented.items()} == _exposed()


def test_metric_names_follow_the_conventions() -> None:
    for name, kind in _exposed().items():
        assert name.startswith("kubegang_"), name
        assert (kind == "counter") == name.endswith("_total"), name
        assert not re.search(r"_(ms|milliseconds|kb|mb|percent)\b", name), f"{name}: use base units"
    for registry in (OPERATOR_REGISTRY, ExtenderMetrics().registry, AgentMetrics().registry):
        for collector in list(registry._collector_to_names):  # labels are not in the exposition of empty metrics
            labels = set(getattr(collector, "_labelnames", ()))
            assert not labels & {"pod", "job", "job_name", "name", "uid"}, f"{collector}: workload name as a label"


def test_dashboard_structure() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Cluster overview", "Queues", "Placement quality", "Scheduler latency", "Node health"]
    assert dashboard["templating"]["list"][0] == {**dashboard["templating"]["list"][0], "name": "datasource",
                                                  "type": "datasource", "query": "prometheus"}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]


def test_promtool_accepts_the_rules_file(promtool: str) -> None:
    proc = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rule_queries())} rules found" in proc.stdout


def test_promtool_accepts_the_rendered_prometheus_rule(promtool: str, render: Render, tmp_path: Path) -> None:
    rule = render("prometheusRule.enabled=true").one("PrometheusRule", "kg-kubegang")
    assert rule["spec"] == yaml.safe_load(RULES.read_text()), "the chart must embed the rules file unchanged"
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_fires_on_what_it_watches_and_only_then(promtool: str) -> None:
    """``promtool test rules`` over alerts-test.yaml: the first event of a counter series (a GPU's first
    XID, the first gang timeout), no operator reporting at all, a caller's bad requests against the
    extender's own errors, a queue that admits late."""
    cases = Path(__file__).with_name("alerts-test.yaml")
    proc = subprocess.run([promtool, "test", "rules", cases.name], capture_output=True, text=True, timeout=60,
                          cwd=cases.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_alerts_job_names_do_not_depend_on_the_release_name(render: Render) -> None:
    """Prometheus Operator names a target's job after its Service unless ``jobLabel`` says otherwise;
    with ``fullnameOverride`` the Services are not ``*kubegang-extender*`` and KubegangExtenderDown
    fired for ever. The alerts match ``kubegang-<component>``."""
    rendered = render("fullnameOverride=gpu-gang", "serviceMonitor.enabled=true")
    monitor = rendered.one("ServiceMonitor", "gpu-gang")
    label = monitor["spec"]["jobLabel"]
    scraped = [s for s in rendered.kind("Service")
               if any(p.get("name") == "metrics" for p in s["spec"]["ports"])]
    assert {s["metadata"]["labels"].get(label) for s in scraped} == \
        {"kubegang-extender", "kubegang-agent", "kubegang-operator"}
    assert all(s["metadata"]["name"].startswith("gpu-gang-") for s in scraped)
    for _, query in rule_queries():
        for job in re.findall(r'job=~"([^"]+)"', query):
            assert any(re.fullmatch(job, f"kubegang-{c}") for c in ("extender", "agent", "operator")), job


def test_promtool_refuses_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    """The check above can fail: promtool rejects what is not PromQL."""
    broken = {"groups": [{"name": "x", "rules": [{"alert": "Broken", "expr": "sum by (queue (kubegang_x"}]}]}
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0


def test_dashboard_configmap_carries_the_dashboard(render: Render) -> None:
    config_map = render("dashboard.enabled=true", "dashboard.namespace=monitoring").one("ConfigMap", "-dashboard")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert json.loads(config_map["data"]["kubegang.json"]) == json.loads(DASHBOARD.read_text())
