"""Issue 15: ``kubectl gang`` against the real control plane, in the operator suite's scenarios.

The plugin is run as users run it (``kubectl gang ...``, found by kubectl on PATH, with a kubeconfig),
and what it shows is checked against what the operator itself decided and wrote: the dry-run cycle
the plugin runs must say exactly what the operator's cycle wrote in the job's condition, the quota
numbers must be the operator's (GPUQueue status), the victims of a what-if must be the ones the
operator then preempts. A user who may only read their own namespace sees other teams' jobs as
counts, never by name.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from ..conftest import tool
from .conftest import H100


def parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


REPO = Path(__file__).resolve().parents[3]
VENV_BIN = REPO / ".venv" / "bin"


def gang(ops: Any, *args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``kubectl gang ARGS`` with the plugin on PATH, as the cluster admin or another kubeconfig."""
    env = {**ops.cluster.env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    proc = subprocess.run([tool("kubectl"), "gang", *args], capture_output=True, text=True, env=env, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl gang {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def why(ops: Any, job: str, **kw: Any) -> dict[str, Any]:
    return dict(json.loads(gang(ops, "why", job, "-n", ops.namespace, "-o", "json", **kw).stdout))


def pool(ops: Any, size: int) -> tuple[str, list[str]]:
    """Label ``size`` GPU nodes for this test alone; returns (label value, nodes)."""
    ops.cluster.use_shape("superpod-h100")
    value = f"p{ops.namespace[-8:]}"  # the namespace's digest: a valid label value
    names = sorted(n["metadata"]["name"] for n in ops.cluster.get_json("nodes", "-l", "nvidia.com/gpu.present=true")
                   ["items"] if "kubegang-test/pool" not in n["metadata"].get("labels", {}))[:size]
    ops.cluster.kubectl("label", "nodes", *names, f"kubegang-test/pool={value}", "--overwrite")
    return value, names


def pinned(ops: Any, name: str, queue: str, replicas: int, where: str, **spec: Any) -> dict[str, Any]:
    manifest = ops.job_manifest(name, queue, replicas, 8, **spec)
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {"kubegang-test/pool": where}
    return dict(manifest)


def condition(ops: Any, job: str) -> dict[str, Any]:
    cond = ops.condition(job, "Queued")
    assert cond is not None and cond["status"] == "True", ops.status(job)
    return dict(cond)


def unlabel(ops: Any, nodes: list[str]) -> None:
    ops.cluster.kubectl("label", "nodes", *nodes, "kubegang-test/pool-", check=False)


def test_help_is_served_through_kubectl(ops: Any) -> None:
    out = gang(ops, "--help").stdout
    assert "usage: kubectl gang" in out and "why" in out and "what-if" in out


def test_quota_blocked_why_says_what_the_operator_decided_with_its_numbers(ops: Any) -> None:
    where, nodes = pool(ops, 4)
    try:
        q = ops.queue("quota", [(H100, 16)])
        ops.cluster.apply(pinned(ops, "run", q, 2, where))
        ops.wait_phase("run", "Running", timeout=90)
        ops.cluster.apply(pinned(ops, "wait", q, 2, where))
        ops.cluster.wait_for("wait to be QuotaExhausted",
                             lambda: (ops.condition("wait", "Queued") or {}).get("reason") == "QuotaExhausted",
                             timeout=60, interval=1)
        # creationTimestamp has whole seconds and a tie is ordered by UID: "behind" a second later.
        time.sleep(1.1)
        ops.cluster.apply(pinned(ops, "behind", q, 1, where))
        ops.wait_phase("behind", "Queued", timeout=60)
        cond = condition(ops, "wait")
        report = why(ops, "wait")
        assert (report["phase"], report["reason"], report["message"]) == ("Queued", "QuotaExhausted", cond["message"])
        # The dry-run pass of the cycle says word for word what the operator's cycle wrote.
        assert report["nextCycle"]["reason"] == "QuotaExhausted"
        assert report["nextCycle"]["message"] == cond["message"]
        flavor = report["quota"]["flavors"][0]
        assert flavor["shortfalls"] == [{"flavor": H100, "needs": 16.0, "available": 0.0}]
        assert "needs 16 NVIDIA-H100-80GB-HBM3 but can get 0 now: nominal 16, 16 in use" in cond["message"]
        assert report["position"]["inQueue"] == 1 and report["ahead"] == []
        # Without the plugin: the operator writes the position (every few seconds) and the reason column.
        ops.cluster.wait_for("behind's status.queuePosition", lambda: (ops.status("behind").get(
            "queuePosition") or {}).get("queue") == 2, timeout=30, interval=1)
        written = ops.status("behind")["queuePosition"]
        assert (written["cohort"], written["ahead"], written["aheadGPUs"]) == (1, 1, 16)
        # Written once the job has waited 5 s, and not rewritten while its place does not move.
        created = ops.get("behind")["metadata"]["creationTimestamp"]
        assert parse_time(written["updatedAt"]) >= parse_time(created) + dt.timedelta(seconds=5), written
        time.sleep(7)  # longer than the 5 s refresh: a rewrite would be due by now if any were made
        assert ops.status("behind")["queuePosition"] == written
        rows = ops.cluster.kubectl("get", "gj", "-n", ops.namespace).stdout.splitlines()
        assert rows[0].split()[:4] == ["NAME", "QUEUE", "PHASE", "REASON"]
        assert next(r for r in rows if r.startswith("wait ")).split()[2:4] == ["Queued", "QuotaExhausted"]
        behind = why(ops, "behind")
        assert behind["operatorPosition"]["queue"] == 2
        assert behind["position"]["inQueue"] == 2
        assert [a["job"] for a in behind["ahead"]] == [f"{ops.namespace}/wait"]
        text = gang(ops, "why", "wait", "-n", ops.namespace).stdout
        assert f"GPUJob {ops.namespace}/wait: Queued (QuotaExhausted)" in text and cond["message"] in text
        assert "\x1b[" not in text  # no colour when stdout is not a terminal
        # `queues` shows the operator's numbers for the queue (its status is written at most every 5 s).
        ops.cluster.wait_for("the queue's status to count both waiting jobs", lambda: (ops.cluster.get_json(
            "gpuqueue", q).get("status") or {}).get("pending") == 2, timeout=30)
        status = ops.cluster.get_json("gpuqueue", q)["status"]
        row = next(r for r in json.loads(gang(ops, "queues", "-o", "json").stdout)["queues"] if r["name"] == q)
        assert row["flavors"][0]["usage"] == status["usage"][0]["gpus"] == 16
        assert row["pending"] == status["pending"] == 2 and row["admitted"] == status["admitted"] == 1
        assert yaml.safe_load(gang(ops, "queues", "-o", "yaml").stdout)["queues"]
    finally:
        unlabel(ops, nodes)


def test_placement_blocked_why_names_the_best_domain_and_matches_the_operator(ops: Any) -> None:
    where, nodes = pool(ops, 2)
    try:
        q = ops.queue("gpus", [(H100, 1024)])
        ops.cluster.apply(pinned(ops, "run", q, 2, where))
        ops.wait_phase("run", "Running", timeout=90)
        ops.cluster.apply(pinned(ops, "wait", q, 1, where))
        ops.cluster.wait_for("wait to be InsufficientGPUs",
                             lambda: (ops.condition("wait", "Queued") or {}).get("reason") == "InsufficientGPUs",
                             timeout=60, interval=1)
        cond = condition(ops, "wait")
        report = why(ops, "wait")
        assert report["quota"]["fits"] is True
        assert report["placementNow"]["fits"] is False
        assert report["nextCycle"]["message"] == cond["message"]
        assert report["placementNow"]["reason"] in cond["message"]
        # `nodes` shows the pool's GPUs as taken.
        picture = json.loads(gang(ops, "nodes", "-o", "json").stdout)
        free = {n["name"]: n["free"] for n in picture["nodes"]}
        assert all(free[n] == 0 for n in nodes)
        assert "Largest gang placeable now" in gang(ops, "topology").stdout
    finally:
        unlabel(ops, nodes)


def test_what_if_names_the_victims_and_the_operator_preempts_exactly_those(ops: Any, tmp_path: Path) -> None:
    where, nodes = pool(ops, 2)
    try:
        q = ops.queue("prio", [(H100, 1024)], preemption={"withinQueue": "LowerPriority"})
        ops.cluster.apply(pinned(ops, "low-1", q, 1, where, priority=1))
        ops.cluster.apply(pinned(ops, "low-2", q, 1, where, priority=2))
        ops.wait_phase("low-1", "Running", timeout=90)
        ops.wait_phase("low-2", "Running", timeout=90)
        manifest = tmp_path / "high.yaml"
        manifest.write_text(yaml.safe_dump(pinned(ops, "high", q, 1, where, priority=100)))
        report = json.loads(gang(ops, "what-if", "-f", str(manifest), "-n", ops.namespace, "-o", "json").stdout)
        assert report["nextCycle"]["result"] == "Preempting"
        assert report["nextCycle"]["preempts"] == [f"{ops.namespace}/low-1"]  # the lowest priority, only one
        assert ops.pods("high") == [] and all(j["metadata"]["name"] != "high" for j in ops.jobs())  # nothing made
        ops.cluster.apply(yaml.safe_load(manifest.read_text()))
        ops.wait_phase("high", "Running", timeout=90)
        preempted = ops.condition("low-1", "Preempted")
        assert preempted is not None and preempted["status"] == "True"
        assert f"{ops.namespace}/high" in preempted["message"]
        assert ops.condition("low-2", "Preempted") is None
    finally:
        unlabel(ops, nodes)


def test_a_held_backfill_reservation_is_shown(ops: Any) -> None:
    where, nodes = pool(ops, 2)
    try:
        q = ops.queue("bf", [(H100, 1024)], backfill={"reserveAfterSeconds": 0})
        run = pinned(ops, "run", q, 2, where)
        run["spec"]["template"]["metadata"]["annotations"] = {"kubegang.io/fake-runtime": "600s"}
        ops.cluster.apply(run)
        ops.wait_phase("run", "Running", timeout=90)
        ops.cluster.apply(pinned(ops, "big", q, 2, where))
        ops.cluster.wait_for("big to hold a reservation", lambda: "backfill reservation" in (
            ops.condition("big", "Queued") or {}).get("message", ""), timeout=60, interval=1)
        # The operator writes the reserved nodes with the job's position (its cycle keeps them in memory).
        ops.cluster.wait_for("big's status to list its reserved nodes", lambda: (ops.status("big").get(
            "queuePosition") or {}).get("reservedNodes") == sorted(nodes), timeout=30, interval=1)
        report = why(ops, "big")
        assert report["backfillReservation"] == {"nodes": sorted(nodes)}
        # The gang waits for `run`, whose fake runtime is known: an estimate, said as one.
        assert report["estimate"]["known"] is True and report["estimate"]["waitsFor"] == [f"{ops.namespace}/run"]
        text = gang(ops, "why", "big", "-n", ops.namespace).stdout
        assert "Backfill: holds a reservation of 2 nodes" in text and "Estimate: could start in about" in text
        # A job behind it is told whose reservation it is placed around.
        ops.cluster.apply(pinned(ops, "later", q, 1, where))
        ops.wait_phase("later", "Queued", timeout=60)
        assert why(ops, "later")["reservationsOfOthers"] == [{"job": f"{ops.namespace}/big", "nodes": sorted(nodes)}]
    finally:
        unlabel(ops, nodes)


def _restricted_kubeconfig(ops: Any, tmp_path: Path) -> Path:
    """A kubeconfig for a ServiceAccount that may read its own namespace's jobs and pods and the queues."""
    ns = ops.namespace
    cluster_role = f"{ns}-gang-reader"[:63]
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "researcher", "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "gang-user", "namespace": ns},
         "rules": [{"apiGroups": ["kubegang.io"], "resources": ["gpujobs"], "verbs": ["get", "list"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "gang-user", "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gang-user"},
         "subjects": [{"kind": "ServiceAccount", "name": "researcher", "namespace": ns}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": cluster_role},
         "rules": [{"apiGroups": ["kubegang.io"], "resources": ["gpuqueues"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": cluster_role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
         "subjects": [{"kind": "ServiceAccount", "name": "researcher", "namespace": ns}]},
    ]
    ops.cluster.apply(docs)
    token = ops.cluster.kubectl("create", "token", "researcher", "-n", ns).stdout.strip()
    admin = yaml.safe_load(Path(ops.cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": server}],
              "users": [{"name": "researcher", "user": {"token": token}}],
              "contexts": [{"name": "r", "context": {"cluster": "c", "user": "researcher", "namespace": ns}}],
              "current-context": "r"}
    path = tmp_path / "researcher.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_user_without_list_rights_elsewhere_sees_counts_not_other_teams_jobs(ops: Any, tmp_path: Path) -> None:
    where, nodes = pool(ops, 2)
    other = f"{ops.namespace[:50]}-other"
    ops.cluster.kubectl("create", "namespace", other)
    try:
        q = ops.queue("shared", [(H100, 1024)])
        ops.cluster.apply(pinned(ops, "run", q, 2, where))
        ops.wait_phase("run", "Running", timeout=90)
        theirs = pinned(ops, "secret-plan", q, 1, where)
        theirs["metadata"]["namespace"] = other
        ops.cluster.apply(theirs)
        ops.cluster.wait_for("the other team's job to wait", lambda: (ops.cluster.get_json(
            "gpujob", "secret-plan", "-n", other).get("status") or {}).get("phase") == "Queued", timeout=60)
        # FIFO is by creationTimestamp, which has whole seconds: created in the same second, the two
        # would tie and their order be the UIDs' (it was, in a full run). One second apart, it is FIFO.
        time.sleep(1.1)
        ops.cluster.apply(pinned(ops, "mine", q, 1, where))
        ops.wait_phase("mine", "Queued", timeout=60)
        ops.cluster.wait_for("the queue's status to count both", lambda: (ops.cluster.get_json("gpuqueue", q).get(
            "status") or {}).get("pending") == 2, timeout=30)
        admin = why(ops, "mine")
        assert [a["job"] for a in admin["ahead"]] == [f"{other}/secret-plan"]
        kubeconfig = _restricted_kubeconfig(ops, tmp_path)
        report = json.loads(gang(ops, "why", "mine", "-o", "json", kubeconfig=kubeconfig).stdout)
        assert report["ahead"] == [] and report["aheadNotVisible"] == 1
        assert "gpujobs" in report["hidden"]
        assert report["quota"] == admin["quota"]  # the same numbers: the queues' status counts the others
        text = gang(ops, "why", "mine", kubeconfig=kubeconfig).stdout + gang(
            ops, "queues", kubeconfig=kubeconfig).stdout
        assert "secret" not in text
        assert "1 waiting job(s) of other namespaces in this cohort (not visible to you)" in text
        # Nodes are not theirs to list: placement is unknown, not "no place".
        assert report["placementNow"]["unknown"].startswith("nodes are not visible to you")
        assert "Placement: unknown, nodes are not visible to you" in text
    finally:
        ops.cluster.kubectl("delete", "gpujobs", "--all", "-n", other, "--wait=false", check=False)
        ops.cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
        unlabel(ops, nodes)


def test_snapshot_save_then_replay_answers_as_the_live_cluster(ops: Any, tmp_path: Path) -> None:
    where, nodes = pool(ops, 2)
    try:
        q = ops.queue("snap", [(H100, 16)])
        ops.cluster.apply(pinned(ops, "run", q, 2, where))
        ops.wait_phase("run", "Running", timeout=90)
        ops.cluster.apply(pinned(ops, "wait", q, 1, where))
        ops.cluster.wait_for("wait to be QuotaExhausted",
                             lambda: (ops.condition("wait", "Queued") or {}).get("reason") == "QuotaExhausted",
                             timeout=60, interval=1)
        snapshot = tmp_path / "cluster.json"
        url = f"https://127.0.0.1:{ops.kubegang.ports['extender_https']}"
        out = gang(ops, "snapshot", "save", str(snapshot), "--extender", url, "--tls-dir", str(ops.kubegang.tls_dir))
        assert "and the extender snapshot" in out.stdout
        saved = json.loads(snapshot.read_text())
        assert saved["kind"] == "kubegang.io/GangSnapshot" and saved["extender"]["synced"] is True
        live = why(ops, "wait")
        replayed = json.loads(gang(ops, "replay", str(snapshot), "--why", "wait", "-n", ops.namespace,
                                   "-o", "json").stdout)
        for key in ("phase", "reason", "message", "position", "quota", "placementNow", "nextCycle"):
            assert replayed[key] == live[key], key
        manifest = tmp_path / "small.yaml"
        manifest.write_text(yaml.safe_dump(pinned(ops, "small", q, 1, where)))
        offline = json.loads(gang(ops, "replay", str(snapshot), "-f", str(manifest), "-n", ops.namespace,
                                  "-o", "json").stdout)
        online = json.loads(gang(ops, "what-if", "-f", str(manifest), "-n", ops.namespace, "-o", "json").stdout)
        assert offline["nextCycle"] == online["nextCycle"]
        # A job that does not exist is exit status 1, live and replayed alike (2 is bad input).
        for args in (("why", "nope"), ("replay", str(snapshot), "--why", "nope")):
            missing = gang(ops, *args, "-n", ops.namespace, check=False)
            assert missing.returncode == 1 and f"GPUJob {ops.namespace}/nope" in missing.stderr, missing
        # A bad --tls-dir is named, not a traceback.
        bad = gang(ops, "snapshot", "save", str(tmp_path / "x.json"), "--extender", url, "--tls-dir",
                   str(tmp_path), check=False)
        assert bad.returncode == 2 and "--tls-dir" in bad.stderr and "missing" in bad.stderr
    finally:
        unlabel(ops, nodes)
