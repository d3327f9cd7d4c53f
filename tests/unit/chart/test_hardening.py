"""The chart's hardening objects: PriorityClasses for the placement authority, the scheduler and the agent;
user roles aggregated into edit/admin/view; the optional NetworkPolicies, which let exactly the chart's own
callers reach the extender's mTLS ports."""

from __future__ import annotations

from typing import Any

Render = Any  # conftest.Render
HelmRun = Any


def _pod_spec(objects: Any, kind: str, suffix: str) -> dict[str, Any]:
    spec: dict[str, Any] = objects.one(kind, suffix)["spec"]["template"]["spec"]
    return spec


def test_the_placement_authority_its_scheduler_and_the_agent_cannot_be_preempted_by_workloads(render: Render) -> None:
    objects = render()
    classes = {c["metadata"]["name"]: c for c in objects.kind("PriorityClass")}
    assert set(classes) == {"kg-kubegang-critical", "kg-kubegang-node-critical"}
    assert all(c["value"] == 1_000_000_000 and c["globalDefault"] is False for c in classes.values())
    assert _pod_spec(objects, "Deployment", "-extender")["priorityClassName"] == "kg-kubegang-critical"
    assert _pod_spec(objects, "Deployment", "-scheduler")["priorityClassName"] == "kg-kubegang-critical"
    assert _pod_spec(objects, "DaemonSet", "-agent")["priorityClassName"] == "kg-kubegang-node-critical"
    assert "priorityClassName" not in _pod_spec(objects, "Deployment", "-operator"), "a standby takes over"


def test_a_components_own_priority_class_wins_and_creation_can_be_turned_off(render: Render) -> None:
    objects = render("extender.priorityClassName=system-cluster-critical", "priorityClasses.criticalValue=5000")
    assert _pod_spec(objects, "Deployment", "-extender")["priorityClassName"] == "system-cluster-critical"
    assert objects.one("PriorityClass", "kg-kubegang-critical")["value"] == 5000
    off = render("priorityClasses.create=false")
    assert not off.kind("PriorityClass")
    assert not [w for w in off.workloads() if "priorityClassName" in w["spec"]["template"]["spec"]]


def test_the_schema_refuses_a_system_priority_value(run_helm: HelmRun, chart_dir: Any) -> None:
    proc = run_helm("template", "kg", str(chart_dir), "--set", "priorityClasses.criticalValue=2000000000",
                    check=False)
    assert proc.returncode != 0 and "criticalValue" in proc.stderr


def test_user_roles_aggregate_into_edit_admin_and_view(render: Render) -> None:
    objects = render()
    edit = objects.one("ClusterRole", "-kubegang-edit")
    view = objects.one("ClusterRole", "-kubegang-view")
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    rules = {r for rule in edit["rules"] for res in rule["resources"] for r in ((res, v) for v in rule["verbs"])}
    assert {("gpujobs", v) for v in ("create", "update", "patch", "delete", "get", "list", "watch")} <= rules
    assert not {v for res, v in rules if res == "gpujobs/status"} - {"get", "list", "watch"}, "status is the operator's"
    assert not {v for res, v in rules if res in ("gpuqueues", "gpunodes")} - {"get", "list", "watch"}
    assert {v for rule in view["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    off = render("rbac.aggregateToDefaultRoles=false").kind("ClusterRole")
    assert not [r for r in off if r["metadata"]["name"].endswith(("-kubegang-edit", "-kubegang-view"))]


def _selects(policy: dict[str, Any], workload: dict[str, Any]) -> bool:
    wanted = policy["spec"]["podSelector"]["matchLabels"].items()
    return wanted <= workload["spec"]["template"]["metadata"]["labels"].items()


def _peer_selects(peer: dict[str, Any], workload: dict[str, Any]) -> bool:
    wanted = peer["podSelector"]["matchLabels"].items()
    return wanted <= workload["spec"]["template"]["metadata"]["labels"].items()


def test_network_policies_are_off_by_default_and_let_only_the_charts_callers_reach_the_extender(
    render: Render,
) -> None:
    assert not render().kind("NetworkPolicy")
    objects = render("networkPolicy.enabled=true")
    policies = objects.kind("NetworkPolicy")
    assert len(policies) == 4
    for workload in objects.workloads():
        mine = [p for p in policies if _selects(p, workload)]
        assert len(mine) == 1, f"{workload['metadata']['name']}: {len(mine)} policies select it"
        allowed = {port["port"] for rule in mine[0]["spec"]["ingress"] for port in rule["ports"]}
        probed = {c["port"] if isinstance(c["port"], int) else next(
            p["containerPort"] for p in container["ports"] if p["name"] == c["port"])
            for container in workload["spec"]["template"]["spec"]["containers"]
            for probe in ("livenessProbe", "readinessProbe") if probe in container
            for c in [container[probe]["httpGet"]]}
        assert probed <= allowed, f"{workload['metadata']['name']}: probes on {probed - allowed} would be cut"
    extender = objects.one("NetworkPolicy", "-extender")
    by_port = {rule["ports"][0]["port"]: rule for rule in extender["spec"]["ingress"]}
    scheduler, operator = objects.one("Deployment", "-scheduler"), objects.one("Deployment", "-operator")
    assert [_peer_selects(p, scheduler) for p in by_port[8443]["from"]] == [True]
    assert [_peer_selects(p, operator) for p in by_port[9443]["from"]] == [True]
    assert not _peer_selects(by_port[8443]["from"][0], operator), "the operator has no business on the verbs port"
    assert "from" not in by_port[8080], "metrics and health stay reachable by default"


def test_network_policy_peers_come_from_the_values(render: Render) -> None:
    peer = "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring"
    extra = "networkPolicy.extenderFrom[0].namespaceSelector.matchLabels.name=kube-system"
    objects = render("networkPolicy.enabled=true", peer, extra)
    for policy in objects.kind("NetworkPolicy"):
        metrics_rules = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] in (8080, 9402, 10259)]
        assert metrics_rules and all(r["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
                                     for r in metrics_rules)
    verbs = next(r for r in objects.one("NetworkPolicy", "-extender")["spec"]["ingress"]
                 if r["ports"][0]["port"] == 8443)
    assert {"namespaceSelector": {"matchLabels": {"name": "kube-system"}}} in verbs["from"]


def test_the_operator_is_probed_on_its_event_loop_not_on_the_metrics_thread(render: Render) -> None:
    """The operator's liveness endpoint (tests/unit/operator/test_liveness.py): a hung loop fails it."""
    container = render().one("Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0]
    assert "--health-port=8081" in container["args"]
    assert {"name": "health", "containerPort": 8081} in container["ports"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_the_operator_only_reads_kubernetes_pod_groups_and_their_workloads(render: Render) -> None:
    """docs/ray-and-pod-groups.md: the operator's ClusterRole reads `podgroups` and `workloads` (get, list,
    watch), nothing more."""
    roles = [r for r in render().kind("ClusterRole") if r["metadata"]["name"].endswith("-kubegang-operator")]
    assert len(roles) == 1, [r["metadata"]["name"] for r in render().kind("ClusterRole")]
    granted = {(res, verb) for rule in roles[0]["rules"] if "scheduling.k8s.io" in rule.get("apiGroups", [])
               for res in rule["resources"] for verb in rule["verbs"]}
    groups = {(res, verb) for res, verb in granted if res in ("podgroups", "workloads")}
    assert groups == {(res, verb) for res in ("podgroups", "workloads") for verb in ("get", "list", "watch")}
    assert {verb for _, verb in granted} == {"get", "list", "watch"}  # nothing of that group is written
