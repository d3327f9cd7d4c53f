"""Fair share: which queue has borrowed the most, relative to its weight.

Kueue's dominant resource share, generalised to a tree: a queue's share is, over all flavours, the
largest ratio of what it borrows (charge above its quota) to its parent's quota of that flavour,
divided by its weight. A queue within its quota has share 0. Shares compare siblings; to order two
leaves, compare the shares of their ancestors just below their lowest common ancestor (Kueue's
tournament), which is what comparing the root-first tuples of ``share_path`` does.

Ordering uses the share a queue *would* have after admitting the job (as Kueue does), so a large job
does not jump ahead of a small one from a queue that borrows a little less.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kubegang.quota._tree import QuotaTree, _Node


def dominant_share(tree: QuotaTree, queue: str, request: Mapping[str, int] | None = None) -> float:
    """The queue's weighted dominant share among its siblings (0 for a root), after ``request``."""
    node = tree._node(queue)
    if node.parent is None:
        return 0.0
    extra = {f: a for f, a in (request or {}).items() if a}
    return _share(tree, node, extra, _now(tree))


def share_path(tree: QuotaTree, queue: str, request: Mapping[str, int] | None = None) -> tuple[float, ...]:
    """Shares of the queue's ancestors and itself, root's child first, if ``request`` were admitted.

    Lower tuples go first: the first differing element is the share of the two sibling subtrees that
    compete for their common ancestor's pool.
    """
    node = tree._node(queue)
    now = _now(tree)
    steps = tree._extra_along_path(node, request or {})
    return tuple(_share(tree, n, extra, now) for n, extra in reversed(steps) if n.parent is not None)


def _now(tree: QuotaTree) -> float:
    return tree.clock() if tree.fair_sharing.half_life_seconds else 0.0


def _share(tree: QuotaTree, node: _Node, extra: Mapping[str, int], now: float) -> float:
    parent = node.parent
    assert parent is not None
    decay = bool(tree.fair_sharing.half_life_seconds)
    best = 0.0
    for flavor in tree._flavors:
        charge = tree._decayed_charge(node, flavor, now) if decay else node.charged[flavor]
        borrowed = charge + extra.get(flavor, 0) - node.quota[flavor]
        pool = parent.quota[flavor]
        if borrowed > 0 and pool > 0:
            best = max(best, borrowed / pool)
    if best == 0.0:
        return 0.0
    return math.inf if node.weight == 0 else best / node.weight
