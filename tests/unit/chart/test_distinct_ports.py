"""Two listeners of one process on one port are refused at render time, naming both values.

Such a pod rendered fine and then its process exited at every start with "address already in use"
(CrashLoopBackOff), in a traceback that named no value: `operator.metricsPort=8081` (the default
healthPort), `extender.grpcPort=8443` (its httpsPort). The processes refuse it too, naming their flags
(tests/unit/operator/test_listener_ports.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

Render = Any  # conftest.Render
HelmRun = Any  # conftest.HelmRun


@pytest.mark.parametrize(("sets", "named"), [
    (("operator.metricsPort=8081",), "operator.metricsPort and operator.healthPort are both 8081"),
    (("operator.healthPort=8080",), "operator.metricsPort and operator.healthPort are both 8080"),
    (("extender.grpcPort=8443",), "extender.httpsPort and extender.grpcPort are both 8443"),
    (("extender.metricsPort=8443",), "extender.httpsPort and extender.metricsPort are both 8443"),
    (("extender.metricsPort=9443",), "extender.grpcPort and extender.metricsPort are both 9443"),
    (("extender.httpsPort=7000", "extender.grpcPort=7000", "extender.metricsPort=7000"),
     "extender.httpsPort and extender.grpcPort are both 7000"),
], ids=["operator-metrics-on-health", "operator-health-on-metrics", "extender-grpc-on-https",
        "extender-metrics-on-https", "extender-metrics-on-grpc", "extender-all-three"])
def test_a_process_given_one_port_twice_is_refused_naming_both_values(
        run_helm: HelmRun, chart_dir: Path, sets: tuple[str, ...], named: str) -> None:
    args = [arg for s in sets for arg in ("--set", s)]
    proc = run_helm("template", "kg", str(chart_dir), "--kube-version", "1.36.3", *args, check=False)
    assert proc.returncode != 0, f"rendered with {sets}"
    assert named in proc.stderr and "address already in use" in proc.stderr, proc.stderr


def test_equal_ports_of_different_components_are_fine(render: Render) -> None:
    """Each component is its own pod: the operator's and the extender's metrics ports may be equal (the default)."""
    objects = render("operator.metricsPort=9000", "operator.healthPort=9001", "extender.metricsPort=9000",
                     "agent.metricsPort=9000")
    args = objects.one("Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-port=9000" in args and "--health-port=9001" in args
    extender = objects.one("Deployment", "-extender")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--health-port=9000" in extender


def test_distinct_ports_render_where_the_pod_and_its_service_use_them(render: Render) -> None:
    objects = render("extender.httpsPort=7443", "extender.grpcPort=7444", "extender.metricsPort=7445")
    pod = objects.one("Deployment", "-extender")["spec"]["template"]["spec"]["containers"][0]
    assert {"--https-port=7443", "--grpc-port=7444", "--health-port=7445"} <= set(pod["args"])
    assert sorted(p["containerPort"] for p in pod["ports"]) == [7443, 7444, 7445]
    service = objects.one("Service", "-extender")
    assert sorted(p["port"] for p in service["spec"]["ports"]) == [7443, 7444, 7445]
