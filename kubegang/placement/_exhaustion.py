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

The same holds for a *node class* (nodes of one GPU count, GPU model, CPU and memory): demand whose
pods only one class can hold at all (an 8-GPU pod that asks for more CPU and memory than every
other 8-GPU node has) is bound to that class, and the class is scarce while its share of the free
whole GPUs is below that demand's share. FGD counts memory (``WorkloadMix.count_memory``), which
makes memory-hungry mid-size pods prefer the nodes with the most memory; without this rule they
spent the few nodes that the largest pods of openb ``multigpu50`` can use (analysis:
docs/benchmarks-analysis.md, "Memory in the measure, with node classes").
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from kubegang.levels import Level
from kubegang.placement._classes import NodeClasses
from kubegang.placement._fragmentation import WorkloadMix
from kubegang.placement._snapshot import Snapshot
from kubegang.topology import ANY_FLAVOUR


@dataclass(frozen=True, slots=True)
class KeepOff:
    """Capacity a pod leaves alone while some other node takes it."""

    products: frozenset[str] = frozenset()
    """Scarce GPU models (flavour keys); only pods that accept any GPU keep off them."""
    classes: frozenset[int] = frozenset()
    """Scarce node classes (``NodeClasses`` ids); every pod keeps off them (one bound to such a
    class finds no other node, so it still goes there)."""

    def __bool__(self) -> bool:
        return bool(self.products or self.classes)


NOTHING = KeepOff()

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


def _free_whole_gpus(snapshot: Snapshot) -> int:
    """The cluster's free whole GPUs: what both rules compare a model's or a class's share with."""
    every = snapshot.capacity.get(ANY_FLAVOUR)
    return every.free_sum[Level.CLUSTER][0] if every is not None else 0


def scarce_products(snapshot: Snapshot) -> frozenset[str]:
    """Flavour keys of the GPU models whose free whole GPUs are short of their bound demand share."""
    demand = bound_demand(snapshot.workload)
    if not demand:
        return frozenset()
    free_total = _free_whole_gpus(snapshot)
    if free_total <= 0:
        return frozenset()
    scarce = set()
    for key, share in demand.items():
        cap = snapshot.capacity.get(key)
        if cap is not None and cap.free_sum[Level.CLUSTER][0] < share * free_total:
            scarce.add(key)
    return frozenset(scarce)


def exclusive_demand(mix: WorkloadMix, classes: NodeClasses) -> tuple[float, ...]:
    """Per node class: the share of the mix's GPU demand whose pods only that class can hold."""
    got = classes.exclusive_memo.get(mix)
    if got is not None and got[0] == mix.version:
        return got[1]
    bound = [0.0] * len(classes.keys)
    total = 0.0
    for shape, probability in mix.distribution():
        weight = probability * shape.gpus * shape.gpu_milli / 1000.0
        total += weight
        eligible = [c for c in range(len(classes.keys)) if classes.holds(c, shape)]
        if len(eligible) == 1:
            bound[eligible[0]] += weight
    shares = tuple(value / total for value in bound) if total else tuple(bound)
    classes.exclusive_memo[mix] = (mix.version, shares)
    return shares


def scarce_classes(snapshot: Snapshot) -> frozenset[int]:
    """Node classes whose free whole GPUs are short of the demand only they can hold."""
    classes = snapshot.node_classes
    if len(classes.keys) < 2:
        return frozenset()  # one class holds everything anyone asks for: nothing is bound to it
    demand = exclusive_demand(snapshot.workload, classes)
    free_total = _free_whole_gpus(snapshot)
    if free_total <= 0:
        return frozenset()
    return frozenset(c for c, share in enumerate(demand) if share and classes.free[c] < share * free_total)


def spare_for(gang_flavour: str, snapshot: Snapshot) -> KeepOff:
    """What a pod of ``gang_flavour`` should keep off: scarce node classes, and scarce GPU models
    when it accepts any GPU."""
    products = scarce_products(snapshot) if gang_flavour == ANY_FLAVOUR else frozenset()
    classes = scarce_classes(snapshot)
    return KeepOff(products, classes) if products or classes else NOTHING


def on_scarce(snapshot: Snapshot, n: int, keep_off: KeepOff) -> bool:
    """Whether node ``n`` is capacity ``keep_off`` names (a scarce GPU model or node class)."""
    if not keep_off:
        return False
    if keep_off.classes and snapshot.node_classes.of[n] in keep_off.classes:
        return True
    keys = snapshot.gpu_keys[n]
    return bool(keep_off.products) and bool(keys) and keys[0][0] in keep_off.products
