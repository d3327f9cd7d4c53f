"""GPUJob fields of docs/api.md end to end: each promise checked through the API, as a user sees it.

``suspend``, ``ttlSecondsAfterFinished``, the NoGPUsRequested and leaf-queue refusals,
``gpusPerReplica``, GPUs summed over containers, the torchrun and mpi frameworks, the ``kubectl get``
columns and field selector, and ``topology.preferred``: one test each, on the superpod-h100 shape.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any

from .conftest import H100

GPU = "nvidia.com/gpu"
RUNS_2S = {"kubegang.io/fake-runtime": "2s"}


# -- helpers --------------------------------------------------------------------------------------
def _queue_status(ops: Any, queue: str) -> dict[str, Any]:
    return dict(ops.cluster.get_json("gpuqueue", queue).get("status") or {})


def _wait_used(ops: Any, queue: str, gpus: float, timeout: float = 30) -> None:
    # Queue status is written in the background, at most every 5 s.
    ops.cluster.wait_for(f"GPUQueue {queue} status.usedGPUs == {gpus} (last: {_queue_status(ops, queue)})",
                         lambda: _queue_status(ops, queue).get("usedGPUs") == gpus, timeout=timeout, interval=1)


def _suspend(ops: Any, job: str, value: bool) -> None:
    ops.cluster.kubectl("patch", "gpujob", job, "-n", ops.namespace, "--type", "merge",
                        "-p", json.dumps({"spec": {"suspend": value}}))


def _attempts(ops: Any, job: str) -> set[str]:
    return {p["metadata"]["labels"]["kubegang.io/attempt"] for p in ops.pods(job)}


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def _index(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"]["kubegang.io/replica-index"])


def _find(ops: Any, job: str) -> dict[str, Any] | None:
    """The GPUJob, or None once it is deleted (``--ignore-not-found`` prints nothing then)."""
    out = ops.cluster.kubectl("get", "gpujob", job, "-n", ops.namespace, "--ignore-not-found", "-o", "json").stdout
    return json.loads(out) if out.strip() else None


def _at(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _table(out: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """kubectl's table: the header's column names and each row by NAME.

    Cells are cut at the header's column starts (kubectl aligns every column to its header), so an
    empty cell stays in its column instead of shifting the ones after it.
    """
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines, out
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    names = lines[0].split()
    rows: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        row = dict(zip(names, cells, strict=True))
        rows[row["NAME"]] = row
    return names, rows


# -- spec.suspend -----------------------------------------------------------------------------------
def test_suspend_releases_a_running_gang_and_its_quota_and_resume_runs_it_again(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("suspend", [(H100, 16)])
    ops.job("held", q, 1, 8, suspend=True)
    ops.job("run", q, 2, 8)
    ops.wait_phase("run", "Running", timeout=90)
    ops.wait_phase("held", "Suspended", timeout=30)
    _wait_used(ops, q, 16)
    first = _attempts(ops, "run")

    _suspend(ops, "run", True)
    status = ops.wait_phase("run", "Suspended", timeout=60)
    cond = ops.condition("run", "Suspended")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "Suspended", status
    assert not status.get("admittedAt"), status  # the admission is given back, not only the pods
    edited = ops.get("run")["metadata"]["generation"]
    assert edited >= 2 and status["observedGeneration"] == edited, status  # the status describes the edit
    ops.wait_no_pods("run", timeout=60)
    _wait_used(ops, q, 0)
    # The queue is empty now, and still a job created suspended is not admitted into it.
    assert ops.pods("held") == [] and ops.phase("held") == "Suspended"

    _suspend(ops, "run", False)
    ops.wait_phase("run", "Running", timeout=90)
    assert len(ops.running_pods("run")) == 2
    assert not _attempts(ops, "run") & first  # a fresh admission, not the old pods kept somewhere
    cond = ops.condition("run", "Suspended")
    assert cond is not None and cond["status"] == "False", ops.status("run")
    resumed = ops.get("run")["metadata"]["generation"]
    assert resumed > edited and ops.status("run")["observedGeneration"] == resumed, ops.status("run")
    _wait_used(ops, q, 16)
    assert ops.pods("held") == [] and ops.phase("held") == "Suspended"


# -- ttlSecondsAfterFinished --------------------------------------------------------------------------
def test_a_finished_job_is_deleted_ttl_seconds_after_it_finished_and_one_without_a_ttl_is_kept(ops: Any) -> None:
    ttl = 5
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("ttl", [(H100, 16)])
    ops.job("expiring", q, 1, 8, annotations=RUNS_2S, ttlSecondsAfterFinished=ttl)
    ops.job("kept", q, 1, 8, annotations=RUNS_2S)

    # Polled here rather than with wait_phase: the job may be gone before a slower poll sees it done.
    seen: dict[str, Any] = {}

    def succeeded() -> bool:
        body = _find(ops, "expiring")
        assert body is not None, f"expiring deleted before it was seen Succeeded; last status {seen}"
        seen.update(body.get("status") or {})
        return seen.get("phase") == "Succeeded"

    ops.cluster.wait_for("expiring to succeed", succeeded, timeout=60, interval=0.5)
    finished = _at(seen["finishedAt"])
    ops.cluster.wait_for("expiring to be deleted", lambda: _find(ops, "expiring") is None,
                         timeout=ttl + 30, interval=0.5)
    gone = dt.datetime.now(dt.UTC)
    # finishedAt is whole seconds, rounded down: the deletion can never be seen earlier than this.
    assert (gone - finished).total_seconds() >= ttl, (finished, gone)
    # Owner references take the kept finished pod with the job.
    ops.cluster.wait_for("expiring's pod to be collected", lambda: ops.pods("expiring") == [],
                         timeout=30, interval=1)

    kept = ops.wait_phase("kept", "Succeeded", timeout=30)
    done = ops.condition("kept", "Succeeded")
    assert done is not None and (done["status"], done["reason"]) == ("True", "AllReplicasSucceeded"), kept
    # The documented timestamps, in the order the gang lived them (whole seconds, so equal is allowed).
    stamps = [_at(kept[key]) for key in ("admittedAt", "podsCreatedAt", "startedAt", "finishedAt")]
    assert stamps == sorted(stamps), kept
    wait = (_at(kept["finishedAt"]) + dt.timedelta(seconds=ttl + 3) - dt.datetime.now(dt.UTC)).total_seconds()
    time.sleep(max(wait, 0))
    assert _find(ops, "kept") is not None, "a job without ttlSecondsAfterFinished was deleted"
    assert ops.phase("kept") == "Succeeded"


# -- NoGPUsRequested ----------------------------------------------------------------------------------
def test_a_job_whose_pods_ask_for_no_gpu_is_unschedulable_with_no_gpus_requested(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("nogpu", [(H100, 16)])
    bare = ops.job_manifest("cpu-only", q, 2, 0)
    del bare["spec"]["template"]["spec"]["containers"][0]["resources"]
    ops.cluster.apply(bare)
    zero = ops.job_manifest("zero", q, 1, 0, gpusPerReplica=0)
    del zero["spec"]["template"]["spec"]["containers"][0]["resources"]
    ops.cluster.apply(zero)
    # docs/quota.md: MIG slices are no GPUs to this version.
    mig = ops.job_manifest("mig-only", q, 1, 0)
    mig["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": 1}}
    ops.cluster.apply(mig)
    # Behind them in the queue: refusing them must not stop the queue.
    ops.job("gpu", q, 1, 8)
    ops.wait_phase("gpu", "Running", timeout=90)
    for name in ("cpu-only", "zero", "mig-only"):
        status = ops.wait_phase(name, "Unschedulable", timeout=60)
        cond = ops.condition(name, "Unschedulable")
        assert cond is not None and cond["status"] == "True" and cond["reason"] == "NoGPUsRequested", status
        assert status.get("reason") == "NoGPUsRequested", status
        assert "asks for no GPU" in cond["message"], cond
        assert ops.pods(name) == []


# -- queue must be a leaf -----------------------------------------------------------------------------
def test_a_job_submitted_to_a_queue_with_children_is_unschedulable_not_a_leaf_queue(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    org = ops.queue("org", [])
    team = ops.queue("team", [(H100, 16)], parent=org)
    ops.job("to-parent", org, 1, 8)
    ops.job("to-leaf", team, 1, 8)
    ops.wait_phase("to-leaf", "Running", timeout=90)
    status = ops.wait_phase("to-parent", "Unschedulable", timeout=60)
    cond = ops.condition("to-parent", "Unschedulable")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "NotALeafQueue", status
    assert f"queue {org} is not a leaf queue" in cond["message"] and team in cond["message"], cond
    assert ops.pods("to-parent") == []


# -- gpusPerReplica -----------------------------------------------------------------------------------
def test_gpus_per_replica_becomes_the_first_containers_gpu_limit_and_request(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("per-replica", [(H100, 16)])
    manifest = ops.job_manifest("per-replica", q, 2, 0, gpusPerReplica=4)
    manifest["spec"]["template"]["spec"]["containers"] = [
        {"name": "main", "image": "trainer:1"}, {"name": "sidecar", "image": "logs:1"}]
    ops.cluster.apply(manifest)
    status = ops.wait_phase("per-replica", "Running", timeout=90)
    assert status["totalGPUs"] == 8, status
    pods = ops.running_pods("per-replica")
    assert len(pods) == 2
    for pod in pods:
        resources = _container(pod, "main").get("resources") or {}
        assert str((resources.get("limits") or {}).get(GPU)) == "4", resources
        assert str((resources.get("requests") or {}).get(GPU)) == "4", resources
        sidecar = _container(pod, "sidecar").get("resources") or {}
        assert GPU not in (sidecar.get("limits") or {}) and GPU not in (sidecar.get("requests") or {}), sidecar
        assert len(pod["metadata"]["annotations"]["kubegang.io/gpus"].split(",")) == 4, pod["metadata"]


# -- GPUs per replica = the sum over containers -----------------------------------------------------------
def test_gpus_per_replica_is_the_sum_over_containers_and_the_queue_is_charged_that(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("sum", [(H100, 8)])
    manifest = ops.job_manifest("two-containers", q, 2, 2)
    manifest["spec"]["template"]["spec"]["containers"].append(
        {"name": "helper", "image": "helper:1", "resources": {"limits": {GPU: 2}}})
    ops.cluster.apply(manifest)
    status = ops.wait_phase("two-containers", "Running", timeout=90)
    assert status["totalGPUs"] == 8, status  # 2 replicas x (2 + 2)
    for slot in status["placement"]["pods"]:
        assert len(slot["gpus"]) == 4, status["placement"]
    _wait_used(ops, q, 8)
    assert _queue_status(ops, q)["usage"] == [{"flavor": H100, "gpus": 8}]
    # Charged 8 of its 8: one more GPU does not fit (it would if only the first container counted).
    ops.job("one-more", q, 1, 1)

    def quota_exhausted() -> bool:
        cond = ops.condition("one-more", "Queued")
        return cond is not None and cond["reason"] == "QuotaExhausted"

    ops.cluster.wait_for("one-more to wait for quota", quota_exhausted, timeout=30, interval=1)
    assert ops.pods("one-more") == []


def test_native_sidecars_and_init_containers_count_as_kube_scheduler_counts_them(ops: Any) -> None:
    """docs/api.md, `template`: the sum over containers plus every sidecar (an init container with
    `restartPolicy: Always`) or, when larger, an init container's own request plus the sidecars before it."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("sidecars", [(H100, 8)])
    manifest = ops.job_manifest("sidecars", q, 1, 1)
    manifest["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "shipper", "image": "logs:1", "restartPolicy": "Always", "resources": {"limits": {GPU: 1}}},
        {"name": "warmup", "image": "warmup:1", "resources": {"limits": {GPU: 4}}},
    ]
    ops.cluster.apply(manifest)
    status = ops.wait_phase("sidecars", "Running", timeout=90)
    assert status["totalGPUs"] == 5, status  # max(main 1 + shipper 1, warmup 4 + shipper 1)
    [slot] = status["placement"]["pods"]
    assert len(slot["gpus"]) == 5, status["placement"]
    _wait_used(ops, q, 5)
    [pod] = ops.running_pods("sidecars")
    assert len(pod["metadata"]["annotations"]["kubegang.io/gpus"].split(",")) == 5, pod["metadata"]


# -- framework: torchrun and mpi ----------------------------------------------------------------------
def test_torchrun_and_mpi_gangs_get_a_headless_service_rendezvous_env_and_a_hostfile(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("frameworks", [(H100, 16)])
    ns = ops.namespace
    ops.job("tr", q, 3, 1, framework="torchrun")
    ops.job("mp", q, 2, 2, framework="mpi")
    ops.wait_phase("tr", "Running", timeout=90)
    ops.wait_phase("mp", "Running", timeout=90)

    for job, size in (("tr", 3), ("mp", 2)):
        svc = ops.cluster.get_json("service", job, "-n", ns)
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True, svc["spec"]
        pods = ops.running_pods(job)
        assert sorted(_index(p) for p in pods) == list(range(size))
        for pod in pods:
            labels = pod["metadata"]["labels"]
            assert svc["spec"]["selector"].items() <= labels.items(), (svc["spec"]["selector"], labels)
            # <pod>.<job>.<ns>.svc resolves only with the pod's hostname and the Service as subdomain.
            assert (pod["spec"].get("hostname"), pod["spec"].get("subdomain")) == (f"{job}-{_index(pod)}", job)

    master = f"tr-0.tr.{ns}.svc"
    svc_port = ops.cluster.get_json("service", "tr", "-n", ns)["spec"]["ports"][0]["port"]
    for pod in ops.running_pods("tr"):
        env = _env(_container(pod, "main"))
        assert env.get("MASTER_ADDR") == master, env
        assert env.get("MASTER_PORT") == "29500" == str(svc_port), (env, svc_port)
        assert env.get("WORLD_SIZE") == "3" and env.get("RANK") == str(_index(pod)), env

    # MASTER_ADDR is replica 0 through the Service: its EndpointSlice names tr-0 with that pod's address.
    pod0 = next(p for p in ops.running_pods("tr") if _index(p) == 0)

    def master_endpoint() -> bool:
        slices = ops.cluster.get_json("endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=tr")["items"]
        return any(e.get("hostname") == "tr-0" and (e.get("targetRef") or {}).get("name") == "tr-0"
                   and pod0["status"].get("podIP") in e.get("addresses", [])
                   for s in slices for e in s.get("endpoints") or [])

    ops.cluster.wait_for("the Service's endpoint tr-0 at replica 0's address", master_endpoint,
                         timeout=30, interval=1)

    hostfile = ops.cluster.get_json("configmap", "mp-hostfile", "-n", ns)["data"]["hostfile"]
    assert hostfile == f"mp-0.mp.{ns}.svc slots=2\nmp-1.mp.{ns}.svc slots=2\n", hostfile
    for pod in ops.running_pods("mp"):
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        assert volumes["kubegang-hostfile"]["configMap"]["name"] == "mp-hostfile", volumes
        main = _container(pod, "main")
        mounts = {m["name"]: m["mountPath"] for m in main.get("volumeMounts") or []}
        assert mounts.get("kubegang-hostfile") == "/etc/kubegang/mpi", mounts
        assert _env(main).get("OMPI_MCA_orte_default_hostfile") == "/etc/kubegang/mpi/hostfile", _env(main)
        assert _env(main).get("KUBEGANG_HOSTFILE") == "/etc/kubegang/mpi/hostfile", _env(main)


# -- kubectl columns and field selector -----------------------------------------------------------------
def test_kubectl_get_shows_the_documented_columns_and_selects_jobs_by_queue(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")
    ns = ops.namespace
    # team-a has no quota of its own: what it runs is borrowed, so its fair share is above 0
    # (8 borrowed of the 16 the parent reaches, over weight 2: 0.25).
    org = ops.queue("org", [(H100, 0)])
    team_a = ops.queue("a", [(H100, 0)], parent=org, weight=2)
    team_b = ops.queue("b", [(H100, 16)], parent=org)
    solo = ops.queue("solo", [(H100, 8)])
    ops.job("b-run", team_b, 1, 8)
    ops.wait_phase("b-run", "Running", timeout=90)
    ops.job("a-run", team_a, 1, 8)
    ops.wait_phase("a-run", "Running", timeout=90)
    ops.job("a-wait", team_a, 1, 8)  # the other 8 of team-b's 16 are in use: nothing left to borrow
    ops.job("crashy", solo, 1, 1, restartLimit=1,
            annotations={"kubegang.io/fake-exit-code": "1", "kubegang.io/fake-fail-after": "1s"})
    ops.wait_phase("crashy", "Failed", timeout=90)
    ops.wait_phase("a-wait", "Queued", timeout=30)

    names, rows = _table(ops.cluster.kubectl("get", "gj", "-n", ns).stdout)
    assert names == ["NAME", "QUEUE", "PHASE", "REASON", "READY", "REPLICAS", "GPUS", "AGE"], names
    assert rows["a-run"]["QUEUE"] == team_a and rows["a-run"]["PHASE"] == "Running", rows["a-run"]
    names, rows = _table(ops.cluster.kubectl("get", "gj", "-n", ns, "-o", "wide").stdout)
    assert names == ["NAME", "QUEUE", "PHASE", "REASON", "READY", "REPLICAS", "GPUS", "DOMAIN", "RESTARTS",
                     "AGE"], names
    assert rows["a-run"]["DOMAIN"] == ops.status("a-run")["placement"]["domain"], rows["a-run"]
    assert rows["crashy"]["RESTARTS"] == "1" and rows["crashy"]["PHASE"] == "Failed", rows["crashy"]

    def selected(queue: str) -> set[str]:
        out = ops.cluster.kubectl("get", "gj", "-n", ns, "--field-selector", f"spec.queue={queue}", "-o", "name")
        return {line.split("/", 1)[1] for line in out.stdout.split()}

    assert selected(team_a) == {"a-run", "a-wait"}
    assert selected(team_b) == {"b-run"}
    assert selected(solo) == {"crashy"}

    def counted() -> bool:
        status = _queue_status(ops, team_a)
        return (status.get("usedGPUs"), status.get("pending"), status.get("admitted")) == (8, 1, 1)

    ops.cluster.wait_for(f"GPUQueue {team_a} status to count one running and one waiting job", counted,
                         timeout=30, interval=1)
    names, rows = _table(ops.cluster.kubectl("get", "gq", org, team_a).stdout)
    assert names == ["NAME", "PARENT", "WEIGHT", "USAGE", "PENDING", "AGE"], names
    a = rows[team_a]
    assert (a["PARENT"], a["WEIGHT"], a["USAGE"], a["PENDING"]) == (org, "2", "8", "1"), a
    names, rows = _table(ops.cluster.kubectl("get", "gq", org, team_a, "-o", "wide").stdout)
    assert names == ["NAME", "PARENT", "WEIGHT", "USAGE", "PENDING", "ADMITTED", "SHARE", "AGE"], names
    a = rows[team_a]
    assert a["ADMITTED"] == "1", a
    assert _queue_status(ops, team_a)["fairShare"] == 0.25 and float(a["SHARE"]) == 0.25, a


# -- topology.preferred -----------------------------------------------------------------------------
def test_preferred_leaf_puts_the_whole_gang_in_one_leaf_when_one_is_free(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")  # 4 leaves of 32 nodes x 8 GPUs
    q = ops.queue("preferred", [(H100, 2048)])
    # 20 of one leaf's 32 nodes taken: 12 free there could start the gang, but not hold it.
    ops.job("filler", q, 20, 8, topology={"required": "leaf"})
    ops.wait_phase("filler", "Running", timeout=120)
    ops.job("pref", q, 16, 8, topology={"preferred": "leaf"})
    status = ops.wait_phase("pref", "Running", timeout=120)
    labels = ops.node_labels()

    def leaves(job: str) -> set[str]:
        return {labels[p["spec"]["nodeName"]]["kubegang.io/leaf"] for p in ops.running_pods(job)}

    assert len(ops.running_pods("pref")) == 16
    assert len(leaves("pref")) == 1, leaves("pref")
    assert not leaves("pref") & leaves("filler"), (leaves("pref"), leaves("filler"))
    assert status["placement"]["level"] == "leaf", status["placement"]
    assert {status["placement"]["domain"]} == leaves("pref"), status["placement"]


# -- topology.required, every level; topology.preferred that cannot be met --------------------------
def test_every_required_level_holds_its_gang_and_an_unmeetable_preference_is_placed_wider(ops: Any) -> None:
    ops.cluster.use_shape("superpod-h100")  # one NVLink domain per node, 4 leaves in one block
    q = ops.queue("levels", [(H100, 256)])
    jobs = {"on-node": ("node", 2, 4), "in-nvlink": ("nvlink", 2, 4), "in-block": ("block", 3, 8),
            "anywhere": ("cluster", 2, 8)}
    for name, (level, replicas, gpus) in jobs.items():
        ops.job(name, q, replicas, gpus, topology={"required": level})
    # 24 GPUs cannot be in one NVLink domain of 8: best effort places it wider instead of waiting.
    ops.job("wider", q, 3, 8, topology={"preferred": "nvlink"})
    statuses = {name: ops.wait_phase(name, "Running", timeout=120) for name in [*jobs, "wider"]}
    labels = ops.node_labels()

    def nodes(job: str) -> set[str]:
        return {p["spec"]["nodeName"] for p in ops.running_pods(job)}

    assert len(nodes("on-node")) == 1 and len(nodes("in-nvlink")) == 1, (nodes("on-node"), nodes("in-nvlink"))
    assert len({labels[n]["kubegang.io/block"] for n in nodes("in-block")}) == 1, nodes("in-block")
    assert len(ops.running_pods("anywhere")) == 2
    levels = ["node", "nvlink", "leaf", "spine", "block", "cluster"]
    for name, (level, _, _) in jobs.items():
        placed = statuses[name]["placement"]["level"]
        assert levels.index(placed) <= levels.index(level), (name, statuses[name]["placement"])
    wider = statuses["wider"]["placement"]
    assert levels.index(wider["level"]) > levels.index("nvlink") and len(nodes("wider")) == 3, wider


def test_required_spine_and_block_wait_for_room_inside_one_such_domain_while_cluster_spans_them(ops: Any) -> None:
    """On a fabric of 2 blocks x 2 spines x 2 one-node leaves with one node of every spine taken, a
    2-node gang that must stay in one spine and a 3-node gang that must stay in one block wait, while a
    3-node gang allowed anywhere spans both blocks; a spine that gets a second free node runs the first
    (every shipped shape has one spine and one block, where these levels cannot be told apart)."""
    from pathlib import Path

    ops.cluster.use_shape(Path(__file__).with_name("fabric-tiers.yaml"))
    def tier_nodes() -> dict[str, dict[str, str]]:
        return {n: v for n, v in ops.node_labels().items() if v.get("kubegang.io/leaf", "").startswith("tier-leaf-")}

    # Nodes of the same names may still be on their way out from an earlier run of this shape.
    ops.cluster.wait_for("the 8 nodes of fabric-tiers", lambda: len(tier_nodes()) == 8, timeout=60)
    labels = tier_nodes()
    by_leaf = {v["kubegang.io/leaf"]: n for n, v in labels.items()}
    fillers = {f"filler-{i}": by_leaf[f"tier-leaf-{2 * i}"] for i in range(4)}  # the first leaf of every spine
    for name, node in fillers.items():
        ops.cluster.apply({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ops.namespace, "labels": {"kubegang.io/routing": "disabled"}},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: 8}}}]},
        })
    q = ops.queue("tiers", [(H100, 64)])
    ops.job("in-spine", q, 2, 8, topology={"required": "spine"})
    ops.job("in-block", q, 3, 8, topology={"required": "block"})
    ops.job("anywhere", q, 3, 8, topology={"required": "cluster"})
    anywhere = ops.wait_phase("anywhere", "Running", timeout=120)["placement"]
    used = {p["spec"]["nodeName"] for p in ops.running_pods("anywhere")}
    assert anywhere["level"] == "cluster" and len({labels[n]["kubegang.io/block"] for n in used}) == 2, anywhere
    for name in ("in-spine", "in-block"):  # room for them in the cluster, none inside one spine / block
        assert ops.phase(name) in ("Queued", "Unschedulable") and not ops.pods(name), (name, ops.status(name))

    free = set(by_leaf.values()) - set(fillers.values()) - used
    assert len(free) == 1, free
    spine = labels[free.pop()]["kubegang.io/spine"]
    freed = next(name for name, node in fillers.items() if labels[node]["kubegang.io/spine"] == spine)
    ops.cluster.kubectl("delete", "pod", freed, "-n", ops.namespace, "--wait=true")
    in_spine = ops.wait_phase("in-spine", "Running", timeout=120)["placement"]
    assert in_spine["level"] == "spine", in_spine
    assert {labels[p["spec"]["nodeName"]]["kubegang.io/spine"] for p in ops.running_pods("in-spine")} == {spine}
    assert ops.phase("in-block") in ("Queued", "Unschedulable") and not ops.pods("in-block")


# -- status.readyReplicas while a gang forms ------------------------------------------------------------
def test_ready_replicas_of_a_gang_still_forming_is_written_once_its_pods_are_30_s_old(ops: Any) -> None:
    """docs/api.md: while an admitted gang forms, ``readyReplicas`` is written with the Running phase,
    or once its pods are 30 s old and not all ready yet. One pod of two starts at once, the other is
    held back (kwok skips pods annotated ``kubegang.io/fake-never-start``): the count of 1 must not be
    written while the pods are young, and must be written, phase still Admitted, once they are 30 s old."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("ready", [(H100, 16)])
    ops.job("forming", q, 2, 8, annotations={"kubegang.io/fake-never-start": "true"}, gangTimeoutSeconds=300)

    def bound() -> list[dict[str, Any]]:
        return [p for p in ops.pods("forming") if p["spec"].get("nodeName")]

    ops.cluster.wait_for("both pods of forming bound", lambda: len(bound()) == 2, timeout=60, interval=1)
    first = next(p for p in bound() if _index(p) == 0)
    ops.cluster.kubectl("annotate", "pod", first["metadata"]["name"], "-n", ops.namespace,
                        "kubegang.io/fake-never-start-")

    def started() -> bool:
        return any(_index(p) == 0 and p["status"].get("phase") == "Running" for p in ops.pods("forming"))

    ops.cluster.wait_for("pod 0 of forming Running", started, timeout=30, interval=0.5)
    seen_running = dt.datetime.now(dt.UTC)
    created = _at(first["metadata"]["creationTimestamp"])
    assert (seen_running - created).total_seconds() < 20, (created, seen_running)
    young = ops.status("forming")
    assert young.get("phase") == "Admitted" and not young.get("readyReplicas"), young

    ops.cluster.wait_for("readyReplicas 1 written", lambda: ops.status("forming").get("readyReplicas") == 1,
                         timeout=60, interval=0.5)
    written = dt.datetime.now(dt.UTC)
    status = ops.status("forming")
    assert status["phase"] == "Admitted", status
    # Written no earlier than 30 s after the pods were created (1 s for timestamps cut to seconds).
    assert (written - created).total_seconds() >= 29, (created, written, status)
    assert (written - _at(status["podsCreatedAt"])).total_seconds() >= 29, (written, status)
    assert len([p for p in ops.pods("forming") if p["status"].get("phase") == "Running"]) == 1
