"""A copy of a gang pod (the same job-uid and replica-index labels) never takes the original's slot.

The ledger keys a gang's pods by (job, index). A copy bound by ``nodeName`` overwrote that key: the
copy counted as the gang's pod, the original's hold was "already allocated" and dropped, and once the
copy was deleted the slot was forgotten, so the preempt verb's whole-gang check saw the gang without
that pod and let kube-scheduler evict half of it. The copy is now held as a pod outside gangs.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.extender._ledger import Ledger

from .test_ledger import demand, free, make, node, pod


def _gang(ledger: Ledger) -> None:
    ledger.upsert_pod(pod("a", 4, node_name="n0", pinned="n0", gpu_idx="0,1,2,3", job="J", index=0))
    ledger.upsert_pod(pod("c", 4, node_name="n1", pinned="n1", gpu_idx="0,1,2,3", job="J", index=1))


def test_a_copy_holds_its_own_gpus_and_the_original_keeps_the_slot(caplog: pytest.LogCaptureFixture) -> None:
    ledger = make(1)
    ledger.upsert_pod(pod("k0", 4, pinned="n0", gpu_idx="4,5,6,7", job="K", index=0))   # another gang's plan
    ledger.upsert_pod(pod("a", 2, node_name="n0", pinned="n0", gpu_idx="0,1", job="J", index=0))
    ledger.upsert_pod(pod("b", 2, node_name="n0", job="J", index=0))                     # the copy
    snap = ledger.snapshot()
    assert snap["unplaced"] == {} and ledger._displaced == {}
    assert snap["pods"]["a"]["owner"] == "J" and snap["pods"]["b"]["owner"] == "pod/b"
    assert free(ledger) == {"n0": 0}
    assert "pod ns/p-b claims pod 0 of job J, which pod ns/p-a holds" in caplog.text
    ledger.delete_pod("b")
    assert ledger._by_slot[("J", 0)] == "a" and free(ledger) == {"n0": 2}


def test_after_the_copy_is_gone_preemption_still_takes_whole_gangs_only() -> None:
    ledger = make(2)
    _gang(ledger)
    ledger.upsert_pod(pod("b", 4, node_name="n0", job="J", index=0))
    ledger.snapshot()
    ledger.delete_pod("b")
    assert ledger.preempt(demand(8), {"n1": ["c"]}) == {}
    assert ledger.preempt(demand(8), {"n1": ["c", "a"]}) == {"n1": ["c", "a"]}


def test_a_copy_with_the_same_gpu_annotation_does_not_take_the_originals_gpus() -> None:
    ledger = make(2)
    _gang(ledger)
    copy = pod("0-copy", 4, node_name="n0", pinned="n0", gpu_idx="0,1,2,3", job="J", index=0)  # sorts first
    ledger.upsert_pod(copy)
    snap = ledger.snapshot()
    assert list(snap["unplaced"]) == ["0-copy"]
    assert {a.pod for a in ledger._current().allocations_of("J")} == {0, 1}


def test_filter_refuses_the_copy_on_the_planned_node_and_names_the_original() -> None:
    ledger = make(2)
    _gang(ledger)
    verdict = ledger.filter(demand(4, uid="b", pinned_node="n0", pinned_gpus=(0, 1, 2, 3), job_uid="J",
                                   pod_index=0), ["n0"])
    assert verdict.passed == []
    assert "pod 0 of job J is ns/p-a" in verdict.failed["n0"]
    same = demand(4, uid="a", pinned_node="n0", pinned_gpus=(0, 1, 2, 3), job_uid="J", pod_index=0)
    assert ledger.filter(same, ["n0"]).passed == ["n0"]


def _born(obj: dict[str, Any], when: str) -> dict[str, Any]:
    obj["metadata"]["creationTimestamp"] = when
    return obj


@pytest.mark.parametrize("order", [1, -1])
def test_after_a_restart_the_older_pod_keeps_the_slot_whatever_the_list_order(order: int) -> None:
    pods = [_born(pod("z-original", 4, node_name="n0", pinned="n0", gpu_idx="0,1,2,3", job="J", index=0),
                  "2026-01-01T00:00:00Z"),
            _born(pod("a-copy", 4, node_name="n0", job="J", index=0), "2026-01-02T00:00:00Z"),
            _born(pod("c", 4, node_name="n1", pinned="n1", gpu_idx="0,1,2,3", job="J", index=1),
                  "2026-01-01T00:00:00Z")]
    ledger = Ledger()
    ledger.replace_all([node("n0"), node("n1")], {}, pods[::order], [])
    snap = ledger.snapshot()
    assert snap["pods"]["z-original"]["owner"] == "J" and snap["pods"]["a-copy"]["owner"] == "pod/a-copy"
    assert ledger._by_slot[("J", 0)] == "z-original" and snap["unplaced"] == {}
    assert free(ledger) == {"n0": 0, "n1": 4}
