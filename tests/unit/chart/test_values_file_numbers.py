"""Numbers from a values FILE render as plain integers in every flag and field.

`helm install -f values.yaml` reads every number as a float64, which a template printed in scientific
notation from a million on: `operator.apiBurst: 1000000` rendered `--api-burst=1e+06` and the operator
exited "expected a number, got '1e+06'"; `replicas: 1e+06` is no integer for the API server, and
`--fatal-xids=1e+06` no XID for the agent. `--set` parses integers and never showed it, so these tests
write a file. Each value is one of a million or more where the schema allows it; ports stop at 65535,
below where the notation starts, and are checked all the same. The rendered arguments are then parsed
by the processes' own flag parsers, which is where the 1e+06 failed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegang.agent.__main__ import _parser as agent_parser
from kubegang.agent._xid import XidPolicy
from kubegang.extender.__main__ import settings_from_args as extender_settings
from kubegang.operator.__main__ import parser as operator_parser
from kubegang.operator.__main__ import settings_from_args as operator_settings

HelmRun = Any  # conftest.HelmRun

BIG = {
    "priorityClasses": {"criticalValue": 1000000, "nodeCriticalValue": 2000000},
    "operator": {
        "replicas": 2000000,
        "metricsPort": 65535,
        "healthPort": 65534,
        "apiQps": 1000000,
        "apiBurst": 1000000,
        "backfillReserveAfterSeconds": 2592000,
        "backfillPlannedReserveAfterSeconds": 1000000,
        "creationConcurrency": 1000000,
        "pdb": {"minAvailable": 1000000},
    },
    "extender": {"replicas": 1, "httpsPort": 65533, "grpcPort": 65532, "metricsPort": 65531},
    "scheduler": {"replicas": 3000000, "verbosity": 10, "pdb": {"minAvailable": 1500000}},
    "agent": {
        "pollIntervalSeconds": 1000000,
        "metricsPort": 65530,
        "fatalXids": [1000000, 4294967295],
        "maxUnavailable": 1000000,
    },
    "securityContext": {"pod": {"runAsUser": 1000000, "runAsGroup": 1000000, "fsGroup": 1000000}},
    "networkPolicy": {"enabled": True},
}

# Go prints a float64 of a million or more as 1e+06 or 1.5e+06: always a sign and two exponent digits. The
# look-arounds keep base64 (certificates) and hex (checksums) from matching.
SCIENTIFIC = re.compile(r"(?<![A-Za-z0-9+/.])\d+(\.\d+)?e[+-]\d\d(?![A-Za-z0-9+/])")


def _render_file(run_helm: HelmRun, chart_dir: Path, tmp_path: Path, values: dict[str, Any]) -> tuple[str, list[Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    out = run_helm("template", "kg", str(chart_dir), "--namespace", "kubegang-system", "--kube-version", "1.36.3",
                   "-f", str(path)).stdout
    return out, [d for d in yaml.safe_load_all(out) if d]


def _one(objects: list[Any], kind: str, suffix: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, (kind, suffix, [o["metadata"]["name"] for o in found])
    one: dict[str, Any] = found[0]
    return one


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = workload["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.fixture
def big(run_helm: HelmRun, chart_dir: Path, tmp_path: Path) -> tuple[str, list[Any]]:
    return _render_file(run_helm, chart_dir, tmp_path, BIG)


def test_no_number_renders_in_scientific_notation(big: tuple[str, list[Any]]) -> None:
    text, _ = big
    # The CRDs' descriptions are prose; everything the chart fills from values must match none.
    filled = [line for line in text.splitlines() if SCIENTIFIC.search(line) and "description" not in line]
    assert not filled, filled


def test_the_operator_flags_and_fields_are_plain_integers(big: tuple[str, list[Any]]) -> None:
    _, objects = big
    operator = _one(objects, "Deployment", "-operator")
    args = _container(operator)["args"]
    for flag in ("--metrics-port=65535", "--health-port=65534", "--api-qps=1000000", "--api-burst=1000000",
                 "--backfill-reserve-after=2592000", "--backfill-planned-reserve-after=1000000",
                 "--creation-concurrency=1000000", "--extender-address=kg-kubegang-extender.kubegang-system.svc:65532"):
        assert flag in args, (flag, args)
    assert operator["spec"]["replicas"] == 2000000
    assert [p["containerPort"] for p in _container(operator)["ports"]] == [65535, 65534]
    assert _one(objects, "Service", "-operator-metrics")["spec"]["ports"][0]["port"] == 65535
    assert _one(objects, "PodDisruptionBudget", "-operator")["spec"]["minAvailable"] == 1000000
    # What failed: the operator's own parser reads every rendered flag.
    parsed = operator_parser().parse_args([a.replace("$(POD_NAME)", "pod-0") for a in args])
    settings = operator_settings(parsed)
    assert (settings.api_burst, settings.creation_concurrency, settings.metrics_port) == (1000000, 1000000, 65535)
    assert settings.api_qps == 1000000.0 and settings.backfill_reserve_after_seconds == 2592000.0


def test_the_extender_and_scheduler_flags_and_fields_are_plain_integers(big: tuple[str, list[Any]]) -> None:
    _, objects = big
    extender = _one(objects, "Deployment", "-extender")
    args = _container(extender)["args"]
    assert {"--https-port=65533", "--grpc-port=65532", "--health-port=65531"} <= set(args)
    assert extender["spec"]["replicas"] == 1
    assert sorted(p["containerPort"] for p in _container(extender)["ports"]) == [65531, 65532, 65533]
    assert sorted(p["port"] for p in _one(objects, "Service", "-extender")["spec"]["ports"]) == [65531, 65532, 65533]
    settings = extender_settings(args)
    assert (settings.https_port, settings.grpc_port, settings.health_port) == (65533, 65532, 65531)
    scheduler = _one(objects, "Deployment", "-scheduler")
    assert scheduler["spec"]["replicas"] == 3000000
    assert "--v=10" in _container(scheduler)["command"]
    config = _one(objects, "ConfigMap", "-scheduler")["data"]["config.yaml"]
    assert 'urlPrefix: "https://kg-kubegang-extender.kubegang-system.svc:65533"' in config
    assert _one(objects, "PodDisruptionBudget", "-scheduler")["spec"]["minAvailable"] == 1500000


def test_the_agent_flags_and_fields_are_plain_integers(big: tuple[str, list[Any]]) -> None:
    _, objects = big
    agent = _one(objects, "DaemonSet", "-agent")
    args = _container(agent)["args"]
    assert {"--poll-interval=1000000", "--metrics-port=65530", "--fatal-xids=1000000,4294967295"} <= set(args)
    assert agent["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1000000
    assert _container(agent)["ports"][0]["containerPort"] == 65530
    assert _one(objects, "Service", "-agent-metrics")["spec"]["ports"][0]["port"] == 65530
    parsed = agent_parser().parse_args([a.replace("$(NODE_NAME)", "node-0") for a in args])
    assert parsed.poll_interval == 1000000.0 and parsed.metrics_port == 65530
    assert {1000000, 4294967295} <= set(XidPolicy.parse_fatal(parsed.fatal_xids).fatal)


def test_the_other_fields_are_plain_integers(big: tuple[str, list[Any]]) -> None:
    _, objects = big
    values = {o["metadata"]["name"]: o["value"] for o in objects if o["kind"] == "PriorityClass"}
    assert values == {"kg-kubegang-critical": 1000000, "kg-kubegang-node-critical": 2000000}
    pod = _one(objects, "Deployment", "-operator")["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"]) == (1000000, 1000000)
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "NetworkPolicy"}
    operator_ports = [p["port"] for p in policies["kg-kubegang-operator"]["spec"]["ingress"][0]["ports"]]
    assert operator_ports == [65535, 65534]
    extender_ports = [r["ports"][0]["port"] for r in policies["kg-kubegang-extender"]["spec"]["ingress"]]
    assert extender_ports == [65533, 65532, 65531]
    assert policies["kg-kubegang-agent"]["spec"]["ingress"][0]["ports"][0]["port"] == 65530


def test_fractional_numbers_keep_their_fraction(run_helm: HelmRun, chart_dir: Path, tmp_path: Path) -> None:
    """apiQps, the backfill delays and pollIntervalSeconds may be fractional: printed as given, not truncated."""
    values = {"operator": {"apiQps": 0.5, "backfillReserveAfterSeconds": 1234567.5,
                           "backfillPlannedReserveAfterSeconds": -1},
              "agent": {"pollIntervalSeconds": 2.5}}
    _, objects = _render_file(run_helm, chart_dir, tmp_path, values)
    args = _container(_one(objects, "Deployment", "-operator"))["args"]
    assert {"--api-qps=0.5", "--backfill-reserve-after=1234567.5", "--backfill-planned-reserve-after=-1"} <= set(args)
    assert "--poll-interval=2.5" in _container(_one(objects, "DaemonSet", "-agent"))["args"]


def test_a_percentage_stays_a_percentage(run_helm: HelmRun, chart_dir: Path, tmp_path: Path) -> None:
    values = {"agent": {"maxUnavailable": "25%"}, "operator": {"pdb": {"minAvailable": "50%"}}}
    _, objects = _render_file(run_helm, chart_dir, tmp_path, values)
    assert _one(objects, "DaemonSet", "-agent")["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "25%"
    assert _one(objects, "PodDisruptionBudget", "-operator")["spec"]["minAvailable"] == "50%"
