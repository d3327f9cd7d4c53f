"""A PodDisruptionBudget never blocks every voluntary eviction, whatever the replicas (templates/pdb.yaml).

With minAvailable >= replicas the disruption controller allows 0 evictions, so `kubectl drain` and node
upgrades wait for ever on the node that runs the component. The chart renders no minAvailable PDB for a
single replica (no budget can keep one pod up and still let its node drain), and refuses, naming both
values, a minAvailable that reaches replicas of 2 or more. The extender (exactly one replica) keeps
maxUnavailable 1, which allows one eviction.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

Render = Any  # conftest.Render
HelmRun = Any  # conftest.HelmRun

KUBE_VERSION = "1.36.3"


def _allowed_evictions(pdb: dict[str, Any], replicas: int) -> int:
    """What the disruption controller would allow with every pod healthy (percentages round up)."""
    spec = pdb["spec"]
    if "maxUnavailable" in spec:
        value = spec["maxUnavailable"]
        return math.ceil(replicas * int(value[:-1]) / 100) if isinstance(value, str) else int(value)
    value = spec["minAvailable"]
    needed = math.ceil(replicas * int(value[:-1]) / 100) if isinstance(value, str) else int(value)
    return max(0, replicas - needed)


def _assert_no_pdb_blocks_eviction(objects: Any) -> None:
    deployments = {d["metadata"]["name"]: d for d in objects.kind("Deployment")}
    for pdb in objects.kind("PodDisruptionBudget"):
        name = pdb["metadata"]["name"]
        assert name in deployments, f"PDB {name} selects no Deployment of the chart"
        replicas = deployments[name]["spec"]["replicas"]
        assert _allowed_evictions(pdb, replicas) >= 1, f"PDB {name} blocks every eviction: {pdb['spec']}"


def _refused(run_helm: HelmRun, chart_dir: Path, *sets: str) -> str:
    args = [arg for s in sets for arg in ("--set", s)]
    proc = run_helm("template", "kg", str(chart_dir), "--kube-version", KUBE_VERSION, *args, check=False)
    assert proc.returncode != 0, f"rendered with {sets}"
    return str(proc.stderr)


def _single_replica(component: str) -> tuple[str, ...]:
    return (f"{component}.replicas=1", f"{component}.leaderElection=false")


@pytest.mark.parametrize("component", ["operator", "scheduler"])
def test_a_single_replica_gets_no_pdb_so_its_node_can_be_drained(render: Render, component: str) -> None:
    objects = render(*_single_replica(component))
    assert objects.one("Deployment", f"-{component}")["spec"]["replicas"] == 1
    names = {p["metadata"]["name"] for p in objects.kind("PodDisruptionBudget")}
    assert f"kg-kubegang-{component}" not in names
    _assert_no_pdb_blocks_eviction(objects)


def test_the_audited_single_replica_install_renders_no_blocking_pdb(render: Render) -> None:
    """The values the chart's own leader-election refusal suggests, for both HA components at once."""
    objects = render("operator.replicas=1", "operator.leaderElection=false",
                     "scheduler.replicas=1", "scheduler.leaderElection=false")
    pdbs = {p["metadata"]["name"]: p["spec"] for p in objects.kind("PodDisruptionBudget")}
    assert pdbs.keys() == {"kg-kubegang-extender"}
    assert pdbs["kg-kubegang-extender"]["maxUnavailable"] == 1
    _assert_no_pdb_blocks_eviction(objects)


def test_a_single_replica_with_leader_election_on_gets_no_pdb_either(render: Render) -> None:
    objects = render("operator.replicas=1", "scheduler.replicas=1")
    assert {p["metadata"]["name"] for p in objects.kind("PodDisruptionBudget")} == {"kg-kubegang-extender"}


@pytest.mark.parametrize("component", ["operator", "scheduler"])
def test_two_replicas_keep_a_pdb_that_allows_one_eviction(render: Render, component: str) -> None:
    objects = render(f"{component}.replicas=2")
    pdb = objects.one("PodDisruptionBudget", f"-{component}")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == component
    assert _allowed_evictions(pdb, 2) == 1
    _assert_no_pdb_blocks_eviction(objects)


@pytest.mark.parametrize("component", ["operator", "scheduler"])
@pytest.mark.parametrize(("replicas", "min_available"), [(2, "2"), (2, "3"), (3, "3")])
def test_a_min_available_that_reaches_the_replicas_is_refused_naming_both_values(
        run_helm: HelmRun, chart_dir: Path, component: str, replicas: int, min_available: str) -> None:
    err = _refused(run_helm, chart_dir, f"{component}.replicas={replicas}",
                   f"{component}.pdb.minAvailable={min_available}")
    assert f"{component}.pdb.minAvailable={min_available} with {component}.replicas={replicas}" in err
    assert "would allow no voluntary eviction" in err and f"{component}.pdb.enabled=false" in err


@pytest.mark.parametrize("component", ["operator", "scheduler"])
def test_a_percentage_counts_as_the_disruption_controller_rounds_it(
        render: Render, run_helm: HelmRun, chart_dir: Path, component: str) -> None:
    objects = render(f"{component}.replicas=2", f"{component}.pdb.minAvailable=50%")
    pdb = objects.one("PodDisruptionBudget", f"-{component}")
    assert pdb["spec"]["minAvailable"] == "50%" and _allowed_evictions(pdb, 2) == 1
    # 51% of 2 pods rounds up to 2: nothing could be evicted.
    err = _refused(run_helm, chart_dir, f"{component}.replicas=2", f"{component}.pdb.minAvailable=51%")
    assert f"{component}.pdb.minAvailable=51% (2 of 2 pods, rounded up) with {component}.replicas=2" in err


@pytest.mark.parametrize("component", ["operator", "scheduler"])
def test_a_larger_deployment_takes_a_larger_min_available(render: Render, component: str) -> None:
    objects = render(f"{component}.replicas=3", f"{component}.pdb.minAvailable=2")
    pdb = objects.one("PodDisruptionBudget", f"-{component}")
    assert pdb["spec"]["minAvailable"] == 2
    _assert_no_pdb_blocks_eviction(objects)


@pytest.mark.parametrize("component", ["operator", "scheduler"])
def test_pdb_enabled_false_still_renders_none(render: Render, component: str) -> None:
    objects = render(f"{component}.pdb.enabled=false", f"{component}.pdb.minAvailable=5")
    assert f"kg-kubegang-{component}" not in {p["metadata"]["name"] for p in objects.kind("PodDisruptionBudget")}


def test_the_extender_pdb_allows_its_one_replica_to_be_evicted(
        render: Render, run_helm: HelmRun, chart_dir: Path) -> None:
    objects = render("extender.replicas=1")
    pdb = objects.one("PodDisruptionBudget", "-extender")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert _allowed_evictions(pdb, objects.one("Deployment", "-extender")["spec"]["replicas"]) == 1
    # Two extenders would be two GPU ledgers: the schema allows exactly one, so no PDB question arises.
    assert "/extender/replicas" in _refused(run_helm, chart_dir, "extender.replicas=2")


def test_no_scheduler_no_scheduler_pdb(render: Render) -> None:
    objects = render("scheduler.enabled=false", "scheduler.replicas=1")
    assert {p["metadata"]["name"] for p in objects.kind("PodDisruptionBudget")} == {
        "kg-kubegang-operator", "kg-kubegang-extender"}
