"""A replay agent on the real control plane: one GPUNode and the GPU labels for every fake node of a
shape, writes only on change, a deleted GPUNode comes back, and the metrics carry the dumps' values.

Checked the way a user checks: ``kubectl get gpunodes``, ``kubectl get nodes`` with label columns.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)
AgentProcess = Any  # what `start_replay_agent` returns (tests/e2e/agent/conftest.py)
StartAgent = Callable[..., AgentProcess]
FABRIC = "kubegang.io/replay-fabric"
FABRIC_REASONS = {"FabricRegistered", "FabricNotSupported", "FabricZeroClusterUuid", "FabricRegistrationIncomplete",
                  "FabricRegistrationFailed", "FabricInconsistent", "FabricUnknown"}
"""The NVLinkFabric condition's reasons, as docs/agent.md lists them."""
DUMP = "kubegang.io/replay-dump"
LABELS = ("nvidia.com/gpu.clique", "nvidia.com/gpu.product", "nvidia.com/gpu.count", "kubegang.io/nvlink-domain")
# shape → (nodes, GPUs per node, product label, NVLink domains and nodes in each)
SHAPES = {
    "gb200-nvl72": (72, 4, "NVIDIA-GB200", {18: 4}),
    "superpod-h100": (128, 8, "NVIDIA-H100-80GB-HBM3", {}),
}


def kwok_nodes(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in cluster.get_json("nodes", "-l", "type=kwok")["items"]}


def gpunodes(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g for g in cluster.get_json("gpunodes")["items"]}


def published(cluster: Cluster, names: set[str]) -> bool:
    current = gpunodes(cluster)
    return names <= set(current) and all("gpus" in current[n].get("status", {}) for n in names)


def api_writes(agent: AgentProcess) -> float:
    return sum(v for (name, _), v in metrics(agent).items() if name == "kubegang_agent_api_writes_total")


def wait_until_served(cluster: Cluster, agent: AgentProcess, nodes: dict[str, Any]) -> None:
    """Every node has a GPUNode with status, and this agent wrote each one's status and labels (GPUNodes
    left by an earlier agent would pass the first check alone)."""
    cluster.wait_for(f"a GPUNode with status for each of the {len(nodes)} nodes",
                     lambda: published(cluster, set(nodes)), timeout=120, interval=1)  # fmt: skip
    cluster.wait_for("the agent's first writes", lambda: api_writes(agent) >= 2 * len(nodes), timeout=60, interval=0.5)


def metrics(agent: AgentProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = agent.get("/metrics")
    assert response.status_code == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}  # fmt: skip


def sample(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in values, f"no sample {name}{labels}"
    return values[key]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_fake_node_of_a_shape_gets_its_gpunode_and_labels(
    cluster: Cluster, start_replay_agent: StartAgent, shape: str
) -> None:
    count, gpus, product, domain_sizes = SHAPES[shape]
    cluster.use_shape(shape)
    nodes = kwok_nodes(cluster)
    assert len(nodes) == count
    # The shape pre-labels product and count, and GPUNodes may remain from an earlier test: start from
    # neither, so that everything checked below is this agent's work.
    cluster.kubectl("label", "nodes", "-l", "type=kwok", *(f"{label}-" for label in LABELS))
    cluster.kubectl("delete", "gpunodes", "--all", "--wait=true")

    agent = start_replay_agent()
    wait_until_served(cluster, agent, nodes)

    table = cluster.kubectl("get", "gpunodes", "--no-headers").stdout.splitlines()
    assert sorted(line.split()[0] for line in table) == sorted(nodes)
    assert {tuple(line.split()[1:3]) for line in table} == {(str(gpus), str(gpus))}, "GPUS and HEALTHY columns"

    by_domain: Counter[str | None] = Counter()
    for name, gpunode in gpunodes(cluster).items():
        status = gpunode["status"]
        assert [g["index"] for g in status["gpus"]] == list(range(gpus)), name
        assert all(g["health"]["healthy"] for g in status["gpus"]), name
        assert len({g["uuid"] for g in status["gpus"]}) == gpus
        domain = status["nvlinkDomain"]["id"] if status.get("nvlinkDomain") else None
        fabric = nodes[name]["metadata"]["annotations"].get(FABRIC)
        assert domain == (fabric.replace("/", ".") if fabric else None), name
        by_domain[domain] += 1
        # docs/agent.md: the conditions, and when the node was last read.
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        assert (conditions["GPUHealthy"]["status"], conditions["GPUHealthy"]["reason"]) == (
            "True", "AllGPUsHealthy"), (name, conditions)
        fabric_condition = conditions["NVLinkFabric"]
        if domain is not None:
            assert (fabric_condition["status"], fabric_condition["reason"]) == ("True", "FabricRegistered"), name
        else:
            assert fabric_condition["reason"] in FABRIC_REASONS - {"FabricRegistered"}, (name, fabric_condition)
        seen = dt.datetime.fromisoformat(status["lastSeen"].replace("Z", "+00:00"))
        assert abs((dt.datetime.now(dt.UTC) - seen).total_seconds()) < 600, (name, status["lastSeen"])
    assert Counter(by_domain.values()) == Counter(domain_sizes) if domain_sizes else by_domain == {None: count}
    uuids = [g["uuid"] for gn in gpunodes(cluster).values() for g in gn["status"]["gpus"]]
    assert len(set(uuids)) == count * gpus, "every replayed GPU has its own UUID"

    # The labels, as `kubectl get nodes -L` shows them.
    def label_rows() -> dict[str, list[str]]:
        out = cluster.kubectl("get", "nodes", "-l", "type=kwok", "--no-headers", "-o",
                              "custom-columns=NAME:.metadata.name," + ",".join(
                                  f"L{i}:.metadata.labels.{label.replace('.', chr(92) + '.')}"
                                  for i, label in enumerate(LABELS))).stdout  # fmt: skip
        return {row.split()[0]: row.split()[1:] for row in out.splitlines()}

    def labelled() -> bool:
        return all(row[1] != "<none>" and row[2] != "<none>" for row in label_rows().values())

    cluster.wait_for("the agent's labels on every node", labelled, timeout=60, interval=1)
    current = gpunodes(cluster)
    for name, (clique, product_label, gpu_count, domain_label) in label_rows().items():
        domain = (current[name]["status"].get("nvlinkDomain") or {}).get("id")
        assert (clique, product_label, gpu_count, domain_label) == (
            domain or "<none>", product, str(gpus), domain or "<none>"), name  # fmt: skip
    assert agent.get("/healthz").status_code == 200


def test_writes_only_on_change_and_a_deleted_gpunode_comes_back(
    cluster: Cluster, start_replay_agent: StartAgent
) -> None:
    cluster.use_shape("superpod-h100")  # the shape the previous test left: no rebuild
    nodes = kwok_nodes(cluster)
    agent = start_replay_agent()
    wait_until_served(cluster, agent, nodes)

    def versions() -> dict[str, str]:
        return {name: g["metadata"]["resourceVersion"] for name, g in gpunodes(cluster).items()}

    poll_s = agent.poll_s
    time.sleep(2 * poll_s)  # let a write still in flight land
    before, writes_before = versions(), api_writes(agent)
    time.sleep(5 * poll_s)
    assert versions() == before, "a GPUNode was written although nothing changed"
    assert api_writes(agent) == writes_before, "the agent wrote to the API although nothing changed"

    victim = sorted(nodes)[len(nodes) // 2]
    old_uid = cluster.get_json("gpunode", victim)["metadata"]["uid"]
    cluster.kubectl("delete", "gpunode", victim)

    def recreated() -> bool:
        found = cluster.kubectl("get", "gpunode", victim, "-o", "json", check=False)
        if found.returncode != 0:
            return False
        obj = json.loads(found.stdout)
        return bool(obj["metadata"]["uid"] != old_uid and obj.get("status", {}).get("gpus"))

    # Far sooner than the resync interval (300 s): the agent watches deletions.
    cluster.wait_for(f"GPUNode {victim} to be recreated", recreated, timeout=10 * poll_s + 10, interval=0.5)
    again = cluster.get_json("gpunode", victim)
    owner = again["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o["uid"]) for o in owner] == [
        ("Node", victim, nodes[victim]["metadata"]["uid"])], "owned by its Node: deleted with it"  # fmt: skip
    after = versions()
    assert {n: v for n, v in after.items() if n != victim} == {n: v for n, v in before.items() if n != victim}
    assert "was deleted; it is recreated at the next poll" in agent.log_tail(20000)


def test_a_gpunode_goes_with_its_node_and_a_node_registered_again_is_served_again(
    cluster: Cluster, start_replay_agent: StartAgent
) -> None:
    cluster.use_shape("superpod-h100")
    nodes = kwok_nodes(cluster)
    agent = start_replay_agent()
    wait_until_served(cluster, agent, nodes)
    name = sorted(nodes)[-1]
    manifest = nodes[name]
    cluster.kubectl("delete", "node", name)

    # The garbage collector (kube-controller-manager) follows the GPUNode's owner reference.
    def gone() -> bool:
        return bool(cluster.kubectl("get", "gpunode", name, check=False).returncode != 0)

    cluster.wait_for(f"GPUNode {name} to go with its node", gone, timeout=60)

    # The same node registers again (same name and annotations, new uid) without the agent's labels.
    metadata = manifest["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        metadata.pop(key, None)
    for label in LABELS:
        metadata["labels"].pop(label, None)
    cluster.kubectl("create", "-f", "-", input=json.dumps({k: v for k, v in manifest.items() if k != "status"}))
    uid = cluster.get_json("node", name)["metadata"]["uid"]

    def served_again() -> bool:
        found = cluster.kubectl("get", "gpunode", name, "-o", "json", check=False)
        labels = cluster.get_json("node", name)["metadata"].get("labels", {})
        if found.returncode != 0 or "nvidia.com/gpu.count" not in labels:
            return False
        owners = json.loads(found.stdout)["metadata"].get("ownerReferences", [])
        return [o["uid"] for o in owners] == [uid]

    cluster.wait_for(f"node {name} to be served again", served_again, timeout=90)
    labels = cluster.get_json("node", name)["metadata"]["labels"]
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.product"]) == ("8", SHAPES["superpod-h100"][2])


def test_metrics_carry_the_replayed_readings(cluster: Cluster, start_replay_agent: StartAgent) -> None:
    cluster.use_shape("superpod-h100")
    nodes = kwok_nodes(cluster)
    agent = start_replay_agent()
    wait_until_served(cluster, agent, nodes)
    values = metrics(agent)
    for name, node in nodes.items():
        dump = json.loads((agent.dumps / f"{node['metadata']['annotations'][DUMP]}.nvml.json").read_text())
        assert sample(values, "kubegang_agent_gpus", node=name) == len(dump["devices"])
        assert sample(values, "kubegang_agent_gpus_healthy", node=name) == len(dump["devices"])
        for device in dump["devices"]:
            gpu = str(device["index"])
            assert (
                sample(values, "kubegang_gpu_memory_total_bytes", node=name, gpu=gpu) == device["MemoryInfo"]["total"]
            )
            assert sample(values, "kubegang_gpu_memory_used_bytes", node=name, gpu=gpu) == device["MemoryInfo"]["used"]
            assert sample(values, "kubegang_gpu_temperature_celsius", node=name, gpu=gpu) == device["Temperature"]
            assert sample(values, "kubegang_gpu_healthy", node=name, gpu=gpu) == 1
            assert sample(values, "kubegang_gpu_ecc_errors", node=name, gpu=gpu, type="uncorrected",
                          counter="volatile") == device["EccErrors"]["uncorrected"]["volatile"]  # fmt: skip
    assert sample(values, "kubegang_agent_poll_duration_seconds_count") >= len(nodes)
    assert sample(values, "kubegang_agent_api_writes_total", kind="status") >= len(nodes)
    errors = {k: v for k, v in values.items() if k[0] == "kubegang_agent_api_write_errors_total" and v}
    assert not errors, f"failed API writes: {errors}"  # a labelled counter shows up only once counted
