"""The growth rule of a Ray cluster scaled past its admission (``operator/_growth.py``): the pods it adds
wait for quota as one slice; the slices go when the base is admitted anew or the cluster shrinks."""

from __future__ import annotations

from kubegang.operator._growth import GrowthStep, StepKind, plan_growth, slice_name, slice_number
from kubegang.operator._job import JobView, job_view

from .conftest import make_job_body

BASE = "raycluster-rc"


def job(name: str, replicas: int, phase: str) -> JobView:
    return job_view(make_job_body(name, replicas=replicas, status={"phase": phase}))


def test_slice_names_cannot_be_another_sources_job() -> None:
    assert slice_name(BASE, 3) == "raycluster-rc.grow-3"
    assert slice_number("raycluster-rc.grow-3", BASE) == 3
    for other in ("raycluster-rc", "raycluster-rc-grow-3", "raycluster-rc.grow-", "raycluster-rc.grow-03",
                  "raycluster-rcx.grow-1", "raycluster-rc.grow-1x"):
        assert slice_number(other, BASE) is None


def test_a_cluster_grown_past_its_admission_asks_for_the_added_pods_as_one_waiting_slice() -> None:
    base = job(BASE, 4, "Running")
    assert plan_growth(base, [], 4) == []
    assert plan_growth(base, [], 6) == [GrowthStep(StepKind.CREATE, "raycluster-rc.grow-1", 2)]
    waiting = job("raycluster-rc.grow-1", 2, "Unschedulable")
    assert plan_growth(base, [waiting], 6) == []
    assert plan_growth(base, [waiting], 7) == [GrowthStep(StepKind.RESIZE, "raycluster-rc.grow-1", 3)]
    # Grown again after the first slice was admitted: the next slice asks only for what is new.
    admitted = job("raycluster-rc.grow-1", 2, "Running")
    assert plan_growth(base, [admitted], 9) == [GrowthStep(StepKind.CREATE, "raycluster-rc.grow-2", 3)]


def test_shrinking_drops_the_waiting_slice_then_the_newest_admitted_one_it_no_longer_needs() -> None:
    base = job(BASE, 4, "Running")
    one, two = job("raycluster-rc.grow-1", 2, "Running"), job("raycluster-rc.grow-2", 2, "Running")
    waiting = job("raycluster-rc.grow-3", 1, "Queued")
    assert plan_growth(base, [one, two, waiting], 8) == [GrowthStep(StepKind.DELETE, "raycluster-rc.grow-3")]
    assert plan_growth(base, [one, two], 7) == []  # slice 2 still runs one pod the cluster wants
    assert plan_growth(base, [one, two], 6) == [GrowthStep(StepKind.DELETE, "raycluster-rc.grow-2")]
    assert plan_growth(base, [one], 3) == [GrowthStep(StepKind.DELETE, "raycluster-rc.grow-1")]


def test_a_base_that_holds_nothing_takes_every_slice_back_and_finished_slices_go() -> None:
    slices = [job("raycluster-rc.grow-1", 2, "Running"), job("raycluster-rc.grow-2", 1, "Queued")]
    for phase in ("Queued", "Unschedulable", "Suspended", "Failed"):
        assert plan_growth(job(BASE, 4, phase), slices, 7) == [
            GrowthStep(StepKind.DELETE, "raycluster-rc.grow-1"), GrowthStep(StepKind.DELETE, "raycluster-rc.grow-2")]
    done = job("raycluster-rc.grow-1", 2, "Failed")
    assert plan_growth(job(BASE, 4, "Running"), [done], 6) == [
        GrowthStep(StepKind.DELETE, "raycluster-rc.grow-1"), GrowthStep(StepKind.CREATE, "raycluster-rc.grow-2", 2)]


def test_two_waiting_slices_left_by_an_earlier_leader_become_one_and_other_jobs_are_ignored() -> None:
    base = job(BASE, 4, "Running")
    stray = [job("raycluster-rc.grow-1", 1, "Queued"), job("raycluster-rc.grow-2", 1, "Queued"),
             job("raycluster-other", 9, "Queued")]
    assert plan_growth(base, stray, 6) == [GrowthStep(StepKind.DELETE, "raycluster-rc.grow-1"),
                                           GrowthStep(StepKind.RESIZE, "raycluster-rc.grow-2", 2)]
