"""``kubectl gang`` answers with the engine: the numbers it shows are the quota tree's, the ledger's and
the admission cycle's, for the scenarios users ask about (quota-blocked, placement-blocked, preemption,
what-if), and other teams' jobs are counted, not named, when RBAC hides them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.kubectl import Engine, nodes_report, queues_report, what_if_report, why_report
from kubegang.kubectl._render import Style
from kubegang.kubectl._why import why_lines
from kubegang.operator._controller import queue_status

from .conftest import H200, cluster, job, queue

NOW = dt.datetime(2026, 12, 1, 10, 30, tzinfo=dt.UTC)


class Plain(Style):
    """No colour, so lines compare as text."""

    def __init__(self) -> None:
        self.on = False


def _why(objects: object, name: str, namespace: str = "a") -> dict:
    engine = Engine(objects)  # type: ignore[arg-type]
    view = engine.find(namespace, name)
    assert view is not None
    return why_report(engine, view, NOW)


def test_quota_blocked_job_shows_the_tree_s_refusal_its_position_and_the_job_ahead() -> None:
    running = job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"])
    running["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 3600
    first = job("first", "a", "team-a", 3, created="2026-12-01T10:01:00Z")
    second = job("second", "a", "team-a", 1, created="2026-12-01T10:02:00Z")
    report = _why(cluster(running, first, second), "second")
    engine = Engine(cluster(running, first, second))
    # Position: behind `first` in its leaf (FIFO at equal priority), its leaf's head first in the cohort.
    assert report["position"] == {"inQueue": 2, "cohort": 1, "cohortRoot": "org", "waitingInQueue": 2}
    assert [a["job"] for a in report["ahead"]] == ["a/first"]
    assert report["ahead"][0]["gpus"] == 24
    # `first` (24 GPUs) cannot fit: team-a has 16 + 16 borrowable, 16 in use. The tree's own words.
    first_view = engine.find("a", "first")
    assert first_view is not None
    first_report = why_report(engine, first_view, NOW)
    quota = first_report["quota"]["flavors"][0]
    assert quota["fits"] is False
    assert quota["shortfalls"] == [{"flavor": H200, "needs": 24.0, "available": 16.0}]
    expected = engine.book.tree.can_admit("team-a", engine.book.usage_of(engine.book.flavor_options(first_view)[0]))
    assert quota["reason"] == expected.reason
    assert "needs 24 NVIDIA-H200 but can get 16 now" in quota["reason"]
    # The limit that binds, as data: org's pool (team-b lends its 16 unused).
    assert quota["binds"] == {"kind": "pool", "queue": "org", "available": 16.0, "withinNominal": 0.0, "lent": 0.0}
    # The dry-run cycle: first stays queued on quota, second (8 GPUs) is admitted past it (backfill).
    assert first_report["nextCycle"]["result"] == "Queued"
    assert first_report["nextCycle"]["reason"] == "QuotaExhausted"
    assert report["nextCycle"]["result"] == "Admitted"
    # When could `first` start: once `run` (activeDeadlineSeconds 3600 from 10:00) ends.
    assert first_report["estimate"]["known"] is True
    assert first_report["estimate"]["waitsFor"] == ["a/run"]
    assert first_report["estimate"]["at"].startswith("2026-12-01T11:00:00")
    assert "activeDeadlineSeconds" in first_report["estimate"]["basis"]


def test_the_fake_runtime_annotation_is_a_known_run_time() -> None:
    running = job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"])
    running["spec"]["template"]["metadata"] = {"annotations": {"kubegang.io/fake-runtime": "15m"}}
    report = _why(cluster(running, job("first", "a", "team-a", 3)), "first")
    assert report["estimate"]["at"].startswith("2026-12-01T10:15:00")
    assert "kubegang.io/fake-runtime" in report["estimate"]["basis"]


def test_a_time_limit_is_a_known_latest_end() -> None:
    running = job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"])
    running["spec"]["timeLimitSeconds"] = 1800
    report = _why(cluster(running, job("first", "a", "team-a", 3)), "first")
    assert report["estimate"]["at"].startswith("2026-12-01T10:30:00")
    assert "timeLimitSeconds" in report["estimate"]["basis"]


def test_placement_blocked_job_names_the_best_domain_and_what_it_lacks() -> None:
    qs = [queue("big", 64)]
    running = job("run", "a", "big", 3, phase="Running", reason="Running", on=["n0", "n1", "n2"])
    wide = job("wide", "a", "big", 2)
    report = _why(cluster(running, wide, queues=qs), "wide")
    assert report["quota"]["fits"] is True
    now = report["placementNow"]
    assert now["fits"] is False and now["bestPods"] == 1 and now["pods"] == 2
    assert report["nextCycle"]["reason"] == "InsufficientGPUs"
    assert report["estimate"]["known"] is False
    assert "no running gang has a known run time" in report["estimate"]["why"]


def test_preemption_pending_names_the_victims_the_cycle_would_evict() -> None:
    qs = [queue("org", 0), queue("team-a", 16, "org"),
          queue("team-b", 16, "org", preemption={"reclaimFromBorrowers": "Any"})]
    borrower = job("borrower", "a", "team-a", 4, phase="Running", reason="Running", on=["n0", "n1", "n2", "n3"])
    lender = job("lender", "b", "team-b", 2)
    report = _why(cluster(borrower, lender, queues=qs), "lender", "b")
    assert report["nextCycle"]["result"] == "Preempting"
    assert report["nextCycle"]["preempts"] == ["a/borrower"]


def test_what_if_answers_for_a_manifest_without_creating_anything() -> None:
    objects = cluster(job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"]))
    engine = Engine(objects)
    manifest = job("try", "a", "team-a", 1)
    del manifest["status"], manifest["metadata"]["uid"]
    report = what_if_report(engine, manifest, "a", NOW)
    assert report["whatIf"] is True
    assert report["nextCycle"]["result"] == "Admitted"
    assert set(report["nextCycle"]["nodes"]) <= {"n2", "n3"}
    assert len(objects.jobs) == 1  # nothing added to what was read


def _as_the_operator_writes(admin: Engine) -> list[dict[str, Any]]:
    """The GPUQueues with the status the operator's leader writes for ``admin``'s cluster (a parent's
    ``pending`` counts its whole subtree), as a user who may read GPUQueues but not others' jobs sees them."""
    statuses = queue_status(admin.cache, admin.book)
    return [{**body, "status": statuses[name]} for name, body in admin.cache.queues.items()]


def test_a_user_who_cannot_list_other_namespaces_sees_counts_and_the_same_quota_numbers() -> None:
    # What the admin sees ...
    other = job("secret-run", "b", "team-b", 2, phase="Running", reason="Running", on=["n0", "n1"])
    mine = job("mine", "a", "team-a", 4)
    theirs = job("secret-wait", "b", "team-b", 1, created="2026-12-01T09:00:00Z")
    admin = Engine(cluster(other, mine, theirs))
    admin_quota = why_report(admin, admin.find("a", "mine"), NOW)["quota"]  # type: ignore[arg-type]
    # ... and what a user of namespace a sees: their own job, queue statuses as the operator wrote them.
    qs = _as_the_operator_writes(admin)
    assert {q["metadata"]["name"]: q["status"]["pending"] for q in qs} == {"org": 2, "team-a": 1, "team-b": 1}
    restricted = cluster(mine, queues=qs)
    restricted.hidden = {"gpujobs": "only namespace a: forbidden", "pods": "only namespace a: forbidden"}
    engine = Engine(restricted)
    report = why_report(engine, engine.find("a", "mine"), NOW)  # type: ignore[arg-type]
    assert report["quota"] == admin_quota
    # One hidden job waits: org's 2 is the subtree's (mine and theirs), so it is not added again.
    assert report["aheadNotVisible"] == 1
    # Said as what it is (docs/why-pending.md): hidden jobs of the cohort, their order unknown.
    assert ("  + 1 waiting job(s) of other namespaces in this cohort (not visible to you), ahead of this one "
            "or behind it") in why_lines(report, Plain())
    assert "may count as free" in report["placementNow"]["partial"]
    assert all("secret" not in a["job"] for a in report["ahead"])
    assert "secret" not in str(queues_report(engine))


def test_hidden_waiting_jobs_are_counted_once_in_a_three_level_tree() -> None:
    """root -> org -> team-a / team-b: the operator's root and org statuses both count every job below."""
    qs = [queue("root", 0), queue("org", 0, "root"), queue("team-a", 16, "org"), queue("team-b", 16, "org")]
    mine = job("mine", "a", "team-a", 4)
    hidden = [job(f"secret-{i}", "b", "team-b", 1) for i in range(2)]
    restricted = cluster(mine, queues=_as_the_operator_writes(Engine(cluster(mine, *hidden, queues=qs))))
    restricted.hidden = {"gpujobs": "only namespace a: forbidden"}
    engine = Engine(restricted)
    report = why_report(engine, engine.find("a", "mine"), NOW)  # type: ignore[arg-type]
    assert report["aheadNotVisible"] == 2


def test_queues_report_shows_the_tree_s_numbers_per_flavour() -> None:
    qs = [queue("org", 0), queue("team-a", 16, "org"), queue("team-b", 16, "org", )]
    qs[2]["spec"]["resources"][0]["lendingLimit"] = 8
    borrower = job("big", "a", "team-a", 3, phase="Running", reason="Running", on=["n0", "n1", "n2"])
    report = queues_report(Engine(cluster(borrower, queues=qs)))
    rows = {q["name"]: q for q in report["queues"]}
    a, b = rows["team-a"]["flavors"][0], rows["team-b"]["flavors"][0]
    assert (a["nominal"], a["usage"], a["borrowed"], a["lent"]) == (16, 24, 8, 0)
    assert (b["nominal"], b["lendingLimit"], b["usage"], b["lent"], b["available"]) == (16, 8, 0, 8, 8)
    assert rows["team-a"]["fairShare"] > 0 == rows["team-b"]["fairShare"]
    assert [q["depth"] for q in report["queues"]] == [0, 1, 1]


def test_nodes_report_counts_free_gpus_per_domain_and_the_largest_gang() -> None:
    running = job("run", "a", "team-a", 1, phase="Running", reason="Running", on=["n0"])
    report = nodes_report(Engine(cluster(running)))
    leaf = report["levels"]["leaf"]
    assert leaf == [{"domain": "h200-leaves", "nodes": 4, "gpus": 32, "free": 24, "unhealthy": 0}]
    assert report["largestGang"]["leaf"] == 24 and report["largestGang"]["node"] == 8


def test_the_fabric_picture_is_one_line_group_per_leaf() -> None:
    from kubegang.kubectl._nodes import nodes_lines
    from kubegang.kubectl._render import Style

    running = job("run", "a", "team-a", 1, phase="Running", reason="Running", on=["n0"])
    report = nodes_report(Engine(cluster(running)))

    class Plain(Style):
        def __init__(self) -> None:
            self.on = False

    lines = nodes_lines(report, Plain())
    assert "nvlink: every NVLink domain is a single node" in lines
    leaf = lines.index("    leaf h200-leaves (4 nodes, 24/32 GPUs free)")
    assert lines[leaf + 1] == "      ######## ........ ........ ........"


def test_backfill_reservations_are_shown_and_the_dry_run_places_around_them() -> None:
    qs = [queue("big", 64)]
    running = job("run", "a", "big", 2, phase="Running", reason="Running", on=["n0", "n1"])
    holder = job("holder", "a", "big", 4, reason="InsufficientGPUs")
    holder["status"]["queuePosition"] = {"queue": 1, "cohort": 1, "ahead": 0, "aheadGPUs": 0,
                                         "reservedNodes": ["n0", "n1", "n2", "n3"]}
    small = job("small", "a", "big", 1, created="2026-12-01T10:05:00Z")
    engine = Engine(cluster(running, holder, small, queues=qs))
    own = why_report(engine, engine.find("a", "holder"), NOW)  # type: ignore[arg-type]
    assert own["backfillReservation"] == {"nodes": ["n0", "n1", "n2", "n3"]}
    report = why_report(engine, engine.find("a", "small"), NOW)  # type: ignore[arg-type]
    assert report["reservationsOfOthers"] == [{"job": "a/holder", "nodes": ["n0", "n1", "n2", "n3"]}]
    # n2 and n3 are free, but reserved: the next cycle does not place `small` there.
    assert report["placementNow"]["fits"] is True
    assert report["nextCycle"]["result"] == "Queued" and report["nextCycle"]["reason"] == "InsufficientGPUs"


def test_reservations_from_the_extender_snapshot_are_held_again() -> None:
    qs = [queue("big", 64)]
    reserved = job("reserved", "a", "big", 2, phase="Queued")
    objects = cluster(reserved, job("other", "a", "big", 3), queues=qs)
    objects.extender = {"reservations": {"uid-reserved": {"placement": [
        {"pod": 0, "node": "n0", "gpus": list(range(8))}, {"pod": 1, "node": "n1", "gpus": list(range(8))}]}}}
    engine = Engine(objects)
    assert engine.reservations == {"uid-reserved"}
    report = why_report(engine, engine.find("a", "other"), NOW)  # type: ignore[arg-type]
    assert report["placementNow"]["fits"] is False and report["placementNow"]["bestPods"] == 2


def test_the_queue_s_history_gives_a_run_time_when_nothing_else_does() -> None:
    running = job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"])
    done = []
    for i, minutes in enumerate((10, 20, 90)):
        body = job(f"done-{i}", "a", "team-a", 1, phase="Running", reason="Running")
        body["status"] = {"phase": "Succeeded", "startedAt": "2026-12-01T08:00:00Z",
                          "finishedAt": f"2026-12-01T{8 + minutes // 60:02d}:{minutes % 60:02d}:00Z", "conditions": []}
        done.append(body)
    report = _why(cluster(running, *done, job("first", "a", "team-a", 3)), "first")
    assert report["estimate"]["known"] is True
    assert report["estimate"]["at"].startswith("2026-12-01T10:20:00")  # started 10:00 + the median, 20 min
    assert "the queue's history (median of 3 finished)" in report["estimate"]["basis"]


def test_without_nodes_placement_is_unknown_not_impossible() -> None:
    objects = cluster(job("mine", "a", "team-a", 1))
    objects.nodes, objects.hidden = [], {"nodes": "forbidden"}
    engine = Engine(objects)
    report = why_report(engine, engine.find("a", "mine"), NOW)  # type: ignore[arg-type]
    assert report["placementNow"] == report["nextCycle"] == {"unknown": "nodes are not visible to you (forbidden)"}
    assert report["estimate"]["known"] is False
    assert report["quota"]["fits"] is True


def test_a_running_job_says_where_it_runs() -> None:
    from kubegang.kubectl._render import Style
    from kubegang.kubectl._why import why_lines

    report = _why(cluster(job("run", "a", "team-a", 2, phase="Running", reason="AllReplicasRunning",
                              on=["n0", "n1"])), "run")
    assert report["placement"] == {"level": "leaf", "domain": "h200-leaves", "nodes": ["n0", "n1"]}
    assert "position" not in report

    class Plain(Style):
        def __init__(self) -> None:
            self.on = False

    assert "Placed in leaf h200-leaves on 2 nodes: n0, n1" in why_lines(report, Plain())
