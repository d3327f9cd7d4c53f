"""Least privilege, enforced by the API server with a real pod-bound token (no impersonation).

agent/policy/ is applied as shipped (the ServiceAccount's namespace changed to the test's); a pod on
node A runs under the ``kubegang-agent`` service account (kwok runs it); the TokenRequest API gives a
token bound to that pod, which carries A in the ``authentication.kubernetes.io/node-name`` claim.
With that token the agent itself (``--once``) may publish node A's GPUNode and labels, and is refused
node B's, by the ValidatingAdmissionPolicy, with its message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)
REPO = Path(__file__).resolve().parents[3]
POLICY = REPO / "agent" / "policy"
DUMP = REPO / "tests" / "fixtures" / "nvml" / "gb200-nvl72-tray.nvml.json"
SERVICE_ACCOUNT = "kubegang-agent"  # the policy matches this name (any namespace)
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
FABRIC = "kubegang.io/replay-fabric"
CLIQUE = "nvidia.com/gpu.clique"


def _policy_documents(namespace: str) -> list[dict[str, Any]]:
    docs = [d for f in sorted(POLICY.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
    return docs


@pytest.fixture
def agent_policy(cluster: Cluster, kubegang_crds: None, namespace: str) -> Iterator[list[dict[str, Any]]]:
    docs = _policy_documents(namespace)
    kinds = {d["kind"] for d in docs}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterRole", "ClusterRoleBinding",
            "ServiceAccount"} <= kinds, kinds  # fmt: skip
    cluster.apply(docs)
    yield docs
    cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false",
                    input=yaml.safe_dump_all(docs), check=False)  # fmt: skip


def _token_kubeconfig(cluster: Cluster, token: str, path: Path) -> Path:
    """The cluster's server and CA from the admin kubeconfig, and nothing of its credentials."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    if "certificate-authority" in server:  # make a relative CA path absolute
        server["certificate-authority"] = str(Path(cluster.kubeconfig).parent / server["certificate-authority"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": server}],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "agent", "context": {"cluster": "e2e", "user": "agent"}}],
        "current-context": "agent",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _as(cluster: Cluster, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = cluster.kubectl("--kubeconfig", str(kubeconfig), *args, check=False)
    return result


def _agent_once(cluster: Cluster, kubeconfig: Path, node: str, fabric: str) -> subprocess.CompletedProcess[str]:
    """The agent itself, in real mode for ``node``, publishing once from the GB200 dump."""
    command = [sys.executable, "-m", "kubegang.agent", "--once", "--node-name", node,
               "--replay-dump", str(DUMP), "--replay-fabric", fabric, "--metrics-port", "0"]  # fmt: skip
    env = {**cluster.env, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def test_a_pod_bound_token_writes_only_its_own_node(
    cluster: Cluster, agent_policy: list[dict[str, Any]], namespace: str, tmp_path: Path
) -> None:
    cluster.use_shape("gb200-nvl72")
    nodes = cluster.get_json("nodes", "-l", "type=kwok")["items"]
    own, other = nodes[0]["metadata"], nodes[-1]["metadata"]  # different racks: different domains
    fabric = {m["name"]: m["annotations"][FABRIC] for m in (own, other)}

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", "namespace": namespace},
           "spec": {"serviceAccountName": SERVICE_ACCOUNT, "nodeName": own["name"],
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": "kubegang/agent:e2e"}]}}  # fmt: skip
    cluster.apply(pod)
    cluster.wait_for("kwok to run the agent pod", lambda: cluster.get_json("pod", "agent", "-n", namespace)
                     .get("status", {}).get("phase") == "Running")  # fmt: skip

    token = cluster.kubectl("create", "token", SERVICE_ACCOUNT, "-n", namespace, "--bound-object-kind", "Pod",
                            "--bound-object-name", "agent").stdout.strip()  # fmt: skip
    agent = _token_kubeconfig(cluster, token, tmp_path / "agent.kubeconfig")
    whoami = json.loads(_as(cluster, agent, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert whoami["username"] == f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    assert whoami.get("extra", {}).get(NODE_NAME_CLAIM) == [own["name"]], whoami

    # A fresh policy is enforced once the API server has loaded it.
    def refuses_other_node() -> bool:
        result = _as(cluster, agent, "label", "node", other["name"], f"{CLIQUE}=e2e", "--overwrite", "--dry-run=server")
        return result.returncode != 0 and "kubegang-agent-own-node-only" in result.stderr

    cluster.wait_for("the admission policy to be enforced", refuses_other_node, timeout=60)

    # Both nodes carry a bogus clique label; only the agent's own node gets it corrected.
    cluster.kubectl("label", "node", own["name"], other["name"], f"{CLIQUE}=bogus", "--overwrite")
    mine = _agent_once(cluster, agent, own["name"], fabric[own["name"]])
    assert mine.returncode == 0, mine.stderr[-3000:]
    domain = fabric[own["name"]].replace("/", ".")
    labels = cluster.get_json("node", own["name"])["metadata"]["labels"]
    assert labels[CLIQUE] == domain and labels["kubegang.io/nvlink-domain"] == domain
    status = cluster.get_json("gpunode", own["name"])["status"]
    assert status["nvlinkDomain"]["id"] == domain and len(status["gpus"]) == 4

    theirs = _agent_once(cluster, agent, other["name"], fabric[other["name"]])
    assert theirs.returncode != 0
    assert f"may write only its own gpunodes, not {other['name']}" in theirs.stderr, theirs.stderr[-3000:]
    assert f"may write only its own nodes, not {other['name']}" in theirs.stderr, theirs.stderr[-3000:]
    assert cluster.get_json("node", other["name"])["metadata"]["labels"][CLIQUE] == "bogus"

    # The same, as kubectl users would try it with the agent's token.
    ok = _as(cluster, agent, "label", "node", own["name"], f"{CLIQUE}=e2e", "--overwrite", "--dry-run=server")
    assert ok.returncode == 0, ok.stderr
    foreign = _as(cluster, agent, "label", "node", other["name"], f"{CLIQUE}=e2e", "--overwrite", "--dry-run=server")
    assert foreign.returncode != 0 and f"may write only its own nodes, not {other['name']}" in foreign.stderr
    fabric_label = _as(cluster, agent, "label", "node", own["name"], "kubegang.io/leaf=mine", "--overwrite",
                       "--dry-run=server")  # fmt: skip
    assert fabric_label.returncode != 0 and "may change only labels" in fabric_label.stderr, fabric_label.stderr
    taint = _as(cluster, agent, "taint", "node", own["name"], "gpu=bad:NoSchedule", "--dry-run=server")
    assert taint.returncode != 0 and "kubegang-agent-own-node-only" in taint.stderr, taint.stderr
    delete = _as(cluster, agent, "delete", "gpunode", own["name"], "--dry-run=server")
    assert delete.returncode != 0 and "forbidden" in delete.stderr, delete.stderr

    # A token not bound to a pod has no node claim: every write is refused.
    unbound = _token_kubeconfig(cluster, cluster.kubectl("create", "token", SERVICE_ACCOUNT, "-n", namespace)
                                .stdout.strip(), tmp_path / "unbound.kubeconfig")  # fmt: skip
    refused = _as(cluster, unbound, "label", "node", own["name"], f"{CLIQUE}=e2e", "--overwrite", "--dry-run=server")
    assert refused.returncode != 0 and f"no {NODE_NAME_CLAIM} claim" in refused.stderr, refused.stderr
