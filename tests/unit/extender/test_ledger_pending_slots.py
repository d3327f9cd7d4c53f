"""A node away for a moment does not end an admitted gang's reservation.

A device plugin that restarts advertises ``nvidia.com/gpu: 0`` for a few seconds; a Node may be
deleted and created again. The rebuild used to drop the whole durable reservation when one slot could
not be placed, and the GPUJob's later events never held it again (the admission was seen already):
the gang's GPUs were free for anybody from then on. Such a slot now stays the gang's, pending, and is
held again once the node has its GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kubegang.extender._ledger import Ledger
from kubegang.placement import GangRequest, Placement

from .test_ledger import demand, free, gpujob, make, node, pod, reserve

NODES = ["n0", "n1"]


def _restarted() -> tuple[Ledger, Placement]:
    """An extender that restarted and holds job-1's recorded placement: one 8-GPU pod on each node."""
    placement = reserve(make(2), "job-1", pods=2)
    ledger = Ledger()
    ledger.replace_all([node(n, 8, leaf="leaf-0") for n in NODES], {}, [], [gpujob("job-1", placement)])
    ledger.synced = True
    assert ledger.reservation_count == 1 and free(ledger) == {"n0": 0, "n1": 0}
    return ledger, placement


def _no_gpus(ledger: Ledger) -> None:
    gone = node("n1", 8, leaf="leaf-0")
    gone["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    ledger.upsert_node(gone)


def _plugin_restart(ledger: Ledger) -> None:
    """As kubelet shows it: the devices stay in capacity, allocatable drops to 0."""
    restarting = node("n1", 8, leaf="leaf-0")
    restarting["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    restarting["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    ledger.upsert_node(restarting)


def _deleted(ledger: Ledger) -> None:
    ledger.delete_node("n1")


@pytest.mark.parametrize("away", [_no_gpus, _plugin_restart, _deleted])
def test_a_durable_reservation_outlives_its_node_going_away_and_coming_back(away: Callable[[Ledger], Any]) -> None:
    ledger, placement = _restarted()
    slot = {a.node: a.pod for a in placement.assignments}
    away(ledger)
    assert ledger.reservation_count == 1
    held = ledger.snapshot()["reservations"]["job-1"]
    assert held["heldPods"] == [0, 1] and held["pendingPods"] == [slot["n1"]]
    assert ledger.filter(demand(8), NODES).passed == []              # n0's slot is held all along
    ledger.upsert_node(node("n1", 8, leaf="leaf-0"))                  # the node is back
    assert ledger.reservation_count == 1 and free(ledger) == {"n0": 0, "n1": 0}
    assert ledger.snapshot()["reservations"]["job-1"]["pendingPods"] == []
    ledger.upsert_gpujob(gpujob("job-1", placement))                  # the job's next event changes nothing
    assert ledger.filter(demand(8), NODES).passed == []


def test_the_pods_of_a_pending_slot_and_the_admission_given_back_end_it() -> None:
    ledger, placement = _restarted()
    _deleted(ledger)
    by_node = {a.node: a for a in placement.assignments}
    a1 = by_node["n1"]
    ledger.upsert_pod(pod("g1", 8, pinned="n1", gpu_idx=",".join(map(str, a1.gpus)), job="job-1", index=a1.pod))
    assert ledger.snapshot()["reservations"]["job-1"]["pendingPods"] == []
    ledger.upsert_gpujob(gpujob("job-1", None, phase="Queued"))
    assert ledger.reservation_count == 0 and free(ledger) == {"n0": 8}


def test_while_a_slot_is_pending_repair_answers_the_whole_placement_and_release_counts_held_gpus() -> None:
    ledger, placement = _restarted()
    _no_gpus(ledger)
    gang = GangRequest(id="job-1", pods=2, gpus_per_pod=8)
    answer = ledger.repair(gang, 60)
    assert isinstance(answer.result, Placement) and answer.displaced == ()
    assert {(a.pod, a.node, a.gpus) for a in answer.result.assignments} == \
        {(a.pod, a.node, a.gpus) for a in placement.assignments}
    assert ledger.release("job-1") == 8                               # n1's 8 were not held: not freed
    assert free(ledger) == {"n0": 8}


def test_a_pending_slot_is_held_again_when_gpus_on_its_node_are_freed() -> None:
    ledger, placement = _restarted()
    a1 = next(a for a in placement.assignments if a.node == "n1")
    ledger.upsert_gpujob(gpujob("job-1", placement))
    # An unbound pod planned by someone else on the same GPUs (not an intruder: it is not bound).
    squatter = pod("s", 8, pinned="n1", gpu_idx=",".join(map(str, a1.gpus)), job="other", index=0)
    _deleted(ledger)
    ledger.upsert_pod(squatter)
    ledger.upsert_node(node("n1", 8, leaf="leaf-0"))
    assert ledger.snapshot()["reservations"]["job-1"]["pendingPods"] == [a1.pod]
    ledger.delete_pod("s")
    assert ledger.snapshot()["reservations"]["job-1"]["pendingPods"] == []
    assert free(ledger) == {"n0": 0, "n1": 0}
