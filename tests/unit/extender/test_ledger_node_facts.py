"""A node's taints and cordon change in place: the same answers as a rebuilt ledger, without a recompile.

Under load kube-controller-manager taints nodes whose heartbeats are late and untaints them again;
each change used to recompile the topology and replay every hold (O(nodes + pods)), which on 1,024
fake nodes was most of the extender's CPU in the full-size benchmark.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kubegang.extender import _ledger_state
from kubegang.extender._ledger import Ledger
from kubegang.placement import GangRequest, Placement
from kubegang.topology import NodeInfo, Taint, compile_index, with_node_facts

from .test_ledger import demand, node, pod

NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
NODES = [f"n{i}" for i in range(6)]


def _node(name: str, *, tainted: bool = False, cordoned: bool = False, leaf: str = "leaf-a") -> dict[str, Any]:
    body = node(name, 8, leaf=leaf)
    body["spec"] = {"taints": [NOT_READY] if tainted else [], "unschedulable": cordoned}
    return body


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = _ledger_state.LedgerState._compile

    def counted(self: Any) -> Any:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(_ledger_state.LedgerState, "_compile", counted)
    return calls


def test_a_flapping_taint_is_seen_at_once_and_costs_no_recompile(compiles: list[int]) -> None:
    ledger = Ledger()
    for name in NODES:
        ledger.upsert_node(_node(name))
    one_gpu = demand(1)
    assert ledger.filter(one_gpu, NODES).passed == NODES
    compiled = len(compiles)
    for _ in range(3):
        ledger.upsert_node(_node("n2", tainted=True))
        verdict = ledger.filter(one_gpu, NODES)
        assert "n2" not in verdict.passed
        assert "untolerated taint node.kubernetes.io/not-ready" in {**verdict.failed, **verdict.unresolvable}["n2"]
        ledger.upsert_node(_node("n3", cordoned=True))
        assert ledger.filter(one_gpu, NODES).passed == ["n0", "n1", "n4", "n5"]
        ledger.upsert_node(_node("n2"))
        ledger.upsert_node(_node("n3"))
        assert ledger.filter(one_gpu, NODES).passed == NODES
    assert len(compiles) == compiled  # twelve changes of node facts, not one recompile
    ledger.upsert_node(_node("n2", leaf="leaf-b"))  # a fabric label is structural: compiled again
    assert ledger.filter(one_gpu, NODES).passed == NODES
    assert len(compiles) == compiled + 1


def test_a_gang_is_not_placed_on_a_node_tainted_after_the_last_rebuild() -> None:
    ledger = Ledger()
    for name in NODES:
        ledger.upsert_node(_node(name))
    ledger.filter(demand(1), NODES)  # the snapshot is current
    for name in NODES[:4]:
        ledger.upsert_node(_node(name, tainted=True))
    out = ledger.reserve(GangRequest(id="job", pods=2, gpus_per_pod=8), None, 60)
    assert isinstance(out.result, Placement)
    assert {a.node for a in out.result.assignments} == {"n4", "n5"}


def _answers(ledger: Ledger) -> tuple[Any, ...]:
    verdicts = [ledger.filter(demand(g, uid=f"probe-{g}"), NODES) for g in (1, 4, 8)]
    return (tuple((tuple(v.passed), tuple(sorted({**v.failed, **v.unresolvable}))) for v in verdicts),
            tuple(sorted(ledger.gpu_totals().items())))


@pytest.mark.parametrize("seed", range(8))
def test_in_place_changes_answer_as_a_ledger_rebuilt_from_the_same_objects(seed: int) -> None:
    rng = random.Random(seed)
    live = Ledger()
    nodes = {name: _node(name) for name in NODES}
    pods: dict[str, dict[str, Any]] = {}
    for body in nodes.values():
        live.upsert_node(body)
    for step in range(40):
        if rng.random() < 0.3:
            name, gpus = rng.choice(NODES), rng.choice((1, 2, 4))
            uid = f"p{step}"
            pods[uid] = pod(uid, gpus, node_name=name, phase="Running")
            live.upsert_pod(pods[uid])
        else:
            name = rng.choice(NODES)
            nodes[name] = _node(name, tainted=rng.random() < 0.5, cordoned=rng.random() < 0.2,
                                leaf="leaf-b" if rng.random() < 0.1 else "leaf-a")
            live.upsert_node(nodes[name])
        fresh = Ledger()
        fresh.replace_all(list(nodes.values()), {}, list(pods.values()))
        assert _answers(live) == _answers(fresh), f"seed {seed} step {step}"


def test_with_node_facts_swaps_taints_and_cordons_only() -> None:
    a = NodeInfo("a", labels={"kubegang.io/leaf": "l1"})
    b = NodeInfo("b", labels={"kubegang.io/leaf": "l1"})
    index = compile_index([a, b])
    tainted = NodeInfo("a", labels={"kubegang.io/leaf": "l1"}, taints=(Taint("k", "v", "NoSchedule"),),
                       unschedulable=True)
    swapped = with_node_facts(index, tainted)
    assert swapped is not None
    assert swapped.nodes == (tainted, b)
    assert swapped.domain_of is index.domain_of and swapped.node_number is index.node_number
    assert with_node_facts(index, NodeInfo("a", labels={"kubegang.io/leaf": "l2"})) is None  # moved leaf
    assert with_node_facts(index, NodeInfo("c")) is None  # not in the index
