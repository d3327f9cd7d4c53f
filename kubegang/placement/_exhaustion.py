"""GPU models that unconstrained pods should leave alone: the demand only they can serve needs them.

Why: FGD (``_fragmentation``) measures *stranded* capacity, free GPUs no pod of the workload can
use. It cannot see *exhausted* capacity. When part of the workload is bound to one GPU model (a
pod that asks for ``gpu:T4``), a pod that accepts any GPU may still fill that model's nodes,
because to FGD it fits there as well as anywhere. On the trace's small-node models (2-GPU T4 and
P100, 4-GPU V100) this happens most: FGD puts small pods on small nodes to keep 8-GPU nodes whole.
Once those nodes are full, the pods bound to them fit nowhere (docs/benchmarks-analysis.md,
"openb variants").

The rule has no tuned constant: a model is *scarce* while its share of the cluster's free whole
GPUs is below its share of the workload's GPU demand that is bound to it (``WorkloadMix``, by
GPUs; demand that accepts several models counts equally toward each). A pod that accepts any GPU
is placed off scarce models when some other node takes it. So each model keeps free GPUs in step
with the demand only it can serve. Where nothing in the mix is bound to a model, as on a cluster
of one GPU model, nothing is ever scarce and placement is FGD's.
"""

from __future__ import annotations

import weakref

from kubegang.levels import Level
from kubegang.placement._fragmentation import WorkloadMix
from kubegang.placement._snapshot import Snapshot
from kubegang.topology import ANY_FLAVOUR

_memo: weakref.WeakKeyDictionary[WorkloadMix, tuple[int, dict[str, float]]] = weakref.WeakKeyDictionary()
"""Mix -> (its version, bound demand share per flavour key); an entry goes with its mix."""


def bound_demand(mix: WorkloadMix) -> dict[str, float]:
    """Flavour key (``gpu:<product>``) -> share of the mix's GPU demand that only it (or models
    named with it) can serve; empty when no demand is bound to a model."""
    got = _memo.get(mix)
    if got is not None and got[0] == mix.version:
        return got[1]
    bound: dict[str, float] = {}
    total = 0.0
    for shape, probability in mix.distribution():
        weight = probability * shape.gpus * shape.gpu_milli / 1000.0
        total += weight
        if ANY_FLAVOUR in shape.flavours:
            continue
        models = [key for key in shape.flavours if key.startswith("gpu:")]
        for key in models:
            bound[key] = bound.get(key, 0.0) + weight / len(models)
    shares = {key: value / total for key, value in bound.items()} if total else {}
    _memo[mix] = (mix.version, shares)
    return shares


def scarce_products(snapshot: Snapshot) -> frozenset[str]:
    """Flavour keys of the GPU models whose free whole GPUs are short of their bound demand share."""
    demand = bound_demand(snapshot.workload)
    if not demand:
        return frozenset()
    every = snapshot.capacity.get(ANY_FLAVOUR)
    free_total = every.free_sum[Level.CLUSTER][0] if every is not None else 0
    if free_total <= 0:
        return frozenset()
    scarce = set()
    for key, share in demand.items():
        cap = snapshot.capacity.get(key)
        if cap is not None and cap.free_sum[Level.CLUSTER][0] < share * free_total:
            scarce.add(key)
    return frozenset(scarce)


def spare_for(gang_flavour: str, snapshot: Snapshot) -> frozenset[str]:
    """The scarce models a pod of ``gang_flavour`` should keep off: none unless it accepts any GPU."""
    if gang_flavour != ANY_FLAVOUR:
        return frozenset()
    return scarce_products(snapshot)


def on_scarce(snapshot: Snapshot, n: int, scarce: frozenset[str]) -> bool:
    """Whether node ``n``'s GPUs are of one of the ``scarce`` models."""
    keys = snapshot.gpu_keys[n]
    return bool(scarce) and bool(keys) and keys[0][0] in scarce
