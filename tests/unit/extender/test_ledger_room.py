"""The ledger's room epoch (``LedgerState.room``): the operator answers a refused ``Plan`` from memory
while it is unchanged, so it must move with every change that can free room, and with nothing a burst
of starting gangs does (or the memory would never be used)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.extender._ledger import Ledger
from kubegang.placement import GangRequest, Placement

from .test_ledger import apply_op, make, node, pod, reserve

PROBES = [GangRequest(id=f"probe-{p}x{g}", pods=p, gpus_per_pod=g)
          for p, g in ((1, 8), (2, 8), (3, 8), (1, 4), (2, 4), (3, 4), (1, 2), (5, 2), (1, 1))]
"""Gangs whose placement the property asks about at every step (never reserved)."""


def claim(ledger: Ledger, job: str, placement: Placement, **kw: Any) -> None:
    """The operator created the gang's pods (planned on the reserved GPUs), and ``kw`` of them."""
    for a in placement.assignments:
        ledger.upsert_pod(pod(f"{job}-{a.pod}", len(a.gpus), pinned=a.node, gpu_idx=",".join(map(str, a.gpus)),
                              job=job, index=a.pod, **kw))


def test_a_gang_that_is_reserved_created_bound_and_started_moves_no_epoch() -> None:
    ledger = make(4)
    room = ledger.room()
    placement = reserve(ledger, "job-1", pods=2)
    claim(ledger, "job-1", placement)
    for a in placement.assignments:
        pinned = {"node_name": a.node}
        claim(ledger, "job-1", Placement("job-1", (a,), placement.level, placement.domain, 0.0, True), **pinned)
        claim(ledger, "job-1", Placement("job-1", (a,), placement.level, placement.domain, 0.0, True),
              phase="Running", **pinned)
    ledger.upsert_pod(pod("plain", 2, node_name=next(n for n in ("n0", "n1", "n2", "n3") if n not in placement.nodes)))
    ledger.upsert_node(node("n0", 8, leaf="leaf-0"))  # the same Node again (a status heartbeat)
    assert ledger.room() == room


def test_what_frees_room_moves_the_epoch() -> None:
    clock = [1000.0]
    ledger = make(4, clock=clock)
    moves = []

    def moved(step: Any) -> None:
        before = ledger.room()
        step()
        moves.append(ledger.room() > before)

    placement = reserve(ledger, "job-1", pods=2, ttl=30)
    moved(lambda: ledger.release("job-1"))
    reserve(ledger, "job-2", pods=1, ttl=30)
    clock[0] += 31
    moved(ledger.expire)
    claim(ledger, "job-3", reserve(ledger, "job-3", pods=1))
    moved(lambda: ledger.upsert_pod(pod("job-3-0", 8, node_name=placement.assignments[0].node,
                                        job="job-3", index=0, phase="Succeeded")))
    ledger.upsert_pod(pod("plain", 4, node_name="n3"))
    moved(lambda: ledger.delete_pod("plain"))
    moved(lambda: ledger.upsert_node({**node("n2", 8, leaf="leaf-1"), "spec": {"unschedulable": True}}))
    moved(lambda: ledger.upsert_node(node("n2", 8, leaf="leaf-1")))
    moved(lambda: ledger.delete_node("n1"))
    assert moves == [True] * 7


def test_an_extender_restarted_starts_from_another_epoch() -> None:
    assert Ledger().room() != Ledger().room()


ops = st.lists(
    st.tuples(st.sampled_from(["reserve", "claim", "bind", "run", "finish", "plain", "delete", "expire",
                               "release", "cordon", "uncordon"]),
              st.integers(0, 5), st.integers(1, 3)),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(ops=ops)
def test_while_the_epoch_stands_a_refused_gang_stays_refused(ops: list[tuple[str, int, int]]) -> None:
    clock = [0.0]
    ledger = make(4, clock=clock)
    pods: dict[str, dict[str, Any]] = {}
    refused_at: dict[str, int] = {}
    """Probe -> the epoch it was last refused at."""
    for op, k, size in ops:
        clock[0] += 10
        apply_op(ledger, pods, op, k, size, clock[0])
        room = ledger.room()
        for probe in PROBES:
            placed = isinstance(ledger.plan(probe), Placement)
            assert not (placed and refused_at.get(probe.id) == room), (probe, op, room)
            if placed:
                refused_at.pop(probe.id, None)
            else:
                refused_at[probe.id] = room
