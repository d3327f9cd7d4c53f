"""A Ray cluster that grows past its admission: the added pods wait for quota as a slice of their own.

A RayCluster is admitted at the size its spec asks for then (``raycluster-<name>``). When a worker group
is scaled up afterwards (by hand or by the Ray autoscaler), restarting the whole cluster at the new size
would throw its running work away, and pinning the new pods anyway would spend quota nobody granted.
Kueue's answer is a workload slice per scale-up (``ElasticJobsViaWorkloadSlices``); kubegang's is the
same idea on its own objects: the GPU pods past the admitted size are represented by one more GPUJob,
a *growth slice* ``raycluster-<name>.grow-<k>`` (a RayCluster's name has no dot, so no other source's
GPUJob can be called so), with the same pod template, queue and topology and only the added pods as its
replicas. It queues, is charged and placed like any GPUJob; once admitted, the bridge pins the waiting
pods to its slots. Preempting or restarting a slice takes only its pods (KubeRay makes them anew and
they wait for it again); preempting the base suspends the whole cluster, as before.

This module is the rule alone (:func:`plan_growth`), pure, so that it is tested on its own; the bridge
(``operator/_sources.py``) carries the steps out.

1. The base holds nothing (queued, preempted, suspended): every slice goes; the base is admitted anew
   at the whole size (its spec follows the cluster's while it holds nothing).
2. Finished slices go (they hold nothing any more).
3. More pods wanted than the holding parts have: the one waiting slice asks for the difference (it is
   created, or resized while it waits).
4. Fewer: a waiting slice goes; then the newest holding slice goes once the cluster no longer needs any
   of its pods (one per step, newest first, so the oldest admissions are the ones kept).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from kubegang.operator._cache import HOLDING_PHASES
from kubegang.operator._conditions import FINISHED_PHASES
from kubegang.operator._job import JobView

GROWTH_INFIX = ".grow-"
"""Between the base GPUJob's name and the slice's number: a dot, which no RayCluster name has."""


def slice_name(base: str, number: int) -> str:
    """The name of growth slice ``number`` (1, 2, ...) of the GPUJob called ``base``."""
    return f"{base}{GROWTH_INFIX}{number}"


def slice_number(name: str, base: str) -> int | None:
    """The slice number of the GPUJob ``name`` if it is a growth slice of ``base``, else None."""
    prefix = f"{base}{GROWTH_INFIX}"
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() and rest[0] != "0" else None


class StepKind(enum.Enum):
    CREATE = "create"
    RESIZE = "resize"
    DELETE = "delete"


@dataclass(frozen=True)
class GrowthStep:
    """One change to a cluster's slices: create or resize slice ``name`` to ``replicas``, or delete it."""

    kind: StepKind
    name: str
    replicas: int = 0


def plan_growth(base: JobView, slices: Sequence[JobView], wanted: int) -> list[GrowthStep]:
    """What to do with the growth slices of ``base`` now that its source wants ``wanted`` GPU pods."""
    numbered = sorted(((n, s) for s in slices if (n := slice_number(s.name, base.name)) is not None),
                      key=lambda pair: pair[0])
    if base.phase not in HOLDING_PHASES:
        return [GrowthStep(StepKind.DELETE, s.name) for _, s in numbered]
    steps = [GrowthStep(StepKind.DELETE, s.name) for _, s in numbered if s.phase in FINISHED_PHASES]
    live = [(n, s) for n, s in numbered if s.phase not in FINISHED_PHASES]
    holding = [(n, s) for n, s in live if s.phase in HOLDING_PHASES]
    waiting = [s for _, s in live if s.phase not in HOLDING_PHASES]
    admitted = base.replicas + sum(s.replicas for _, s in holding)
    more = wanted - admitted
    # At most one slice waits: the newest; any other (left by an earlier leader) goes.
    keep = waiting[-1] if waiting and more > 0 else None
    steps += [GrowthStep(StepKind.DELETE, s.name) for s in waiting if s is not keep]
    if more > 0:
        if keep is None:
            number = max((n for n, _ in numbered), default=0) + 1
            steps.append(GrowthStep(StepKind.CREATE, slice_name(base.name, number), more))
        elif keep.replicas != more:
            steps.append(GrowthStep(StepKind.RESIZE, keep.name, more))
    elif more < 0 and holding:
        _, newest = holding[-1]
        if newest.replicas <= -more:
            steps.append(GrowthStep(StepKind.DELETE, newest.name))
    return steps
