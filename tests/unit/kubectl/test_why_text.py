"""The text form of ``kubectl gang why`` (``why_lines``): each line docs/why-pending.md shows or names,
rendered from the report the engine builds for a scenario that produces it."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubegang.kubectl import ClusterObjects, Engine, why_report
from kubegang.kubectl._render import Style
from kubegang.kubectl._why import why_lines

from .conftest import cluster, job, queue

NOW = dt.datetime(2026, 12, 1, 10, 30, tzinfo=dt.UTC)


class Plain(Style):
    """No colour, so lines compare as text."""

    def __init__(self) -> None:
        self.on = False


def _lines(objects: ClusterObjects, name: str, namespace: str = "a") -> list[str]:
    engine = Engine(objects)
    view = engine.find(namespace, name)
    assert view is not None
    return why_lines(why_report(engine, view, NOW), Plain())


def _running(name: str, q: str, nodes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = job(name, "a", q, len(nodes), phase="Running", reason="Running", on=nodes)
    return body


def _line(lines: list[str], start: str) -> str:
    found = [line for line in lines if line.startswith(start)]
    assert len(found) == 1, (start, lines)
    return found[0]


def test_a_preempting_job_says_its_next_cycle_and_whom_it_would_preempt() -> None:
    qs = [queue("org", 0), queue("team-a", 16, "org"),
          queue("team-b", 16, "org", preemption={"reclaimFromBorrowers": "Any"})]
    borrower = _running("borrower", "team-a", ["n0", "n1", "n2", "n3"])
    lines = _lines(cluster(borrower, job("lender", "b", "team-b", 2), queues=qs), "lender", "b")
    nxt = _line(lines, "Next cycle:")
    assert nxt.startswith("Next cycle: Preempting (Preempting): waiting for quota in queue team-b: ")
    assert nxt.endswith("; preempting a/borrower")
    assert lines[lines.index(nxt) + 1] == "  would preempt: a/borrower"


def test_a_job_no_running_gang_states_a_run_time_for_gets_no_estimate_and_says_why() -> None:
    lines = _lines(cluster(_running("run", "big", ["n0", "n1", "n2"]), job("wide", "a", "big", 2),
                           queues=[queue("big", 64)]), "wide")
    assert _line(lines, "Estimate:") == (
        "Estimate: none (no running gang has a known run time (kubegang.io/fake-runtime, activeDeadlineSeconds, "
        "or finished jobs of its queue))")


def test_a_job_without_a_place_says_why_and_the_best_domain() -> None:
    lines = _lines(cluster(_running("run", "big", ["n0", "n1", "n2"]), job("wide", "a", "big", 2),
                           queues=[queue("big", 64)]), "wide")
    assert _line(lines, "Placement now:") == (
        "Placement now: no place: needs 2 nodes x 8 NVIDIA-H200 GPUs in the cluster; the cluster has 1 such "
        "nodes free; best domain cluster holds 1 of 2 pods")


def _borrowing_tree(limit_on: str) -> list[dict[str, Any]]:
    """org -> (mid ->) team-a (nominal 8) and org -> team-b (16, idle): a borrowingLimit of 8 on
    ``limit_on`` caps team-a at 16 while the tree has 16 unused to lend."""
    qs = [queue("org", 0), queue("mid", 0, "org"), queue("team-a", 8, "mid"), queue("team-b", 16, "org")]
    next(q for q in qs if q["metadata"]["name"] == limit_on)["spec"]["resources"][0]["borrowingLimit"] = 8
    return qs


@pytest.mark.parametrize(("queues", "q", "binds"), [
    (_borrowing_tree("team-a"), "team-a", "bound by the borrowingLimit of queue team-a"),
    # An ancestor's limit binds the leaf below it (the page names "its own or an ancestor's").
    (_borrowing_tree("mid"), "team-a", "bound by the borrowingLimit of queue mid"),
    ([queue("solo", 16)], "solo", "bound by its nominal (queue solo has no parent to borrow from)"),
    ([queue("org", 0), queue("team-a", 8, "org"), queue("team-b", 8, "org")], "team-a",
     "bound by what queue org's tree has unused (its queues' nominal less what they keep and use)"),
], ids=["own borrowingLimit", "ancestor's borrowingLimit", "root nominal", "tree pool"])
def test_the_quota_line_names_the_limit_that_binds(queues: list[dict[str, Any]], q: str, binds: str) -> None:
    lines = _lines(cluster(_running("run", q, ["n0"]), job("big", "a", q, 2), queues=queues), "big")
    quota = lines[lines.index("Quota:") + 1]
    assert quota.startswith(f"  NVIDIA-H200: does not fit now (needs 16, can get 8); {binds}: "), quota


def test_what_the_user_could_not_list_is_noted() -> None:
    objects = cluster(job("mine", "a", "team-a", 1))
    objects.hidden = {"gpujobs": "only namespace a: forbidden"}
    assert _lines(objects, "mine")[-1] == "Note: gpujobs: only namespace a: forbidden"
