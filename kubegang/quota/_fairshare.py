"""Fair share: which queue has borrowed the most, relative to its weight, and the tournament.

Kueue's dominant resource share, generalised to a tree: a queue's share is, over all flavours, the
largest ratio of what it borrows (charge above its quota) to what its parent can reach of that
flavour (its ``reach``: what a job below the parent could take with every other queue idle, so a
parent with no quota of its own still divides by the pool it borrows from), divided by its weight.
A queue within its quota has share 0.

Shares compare siblings only. Heads are ordered by Kueue's fair-sharing *tournament*: the heads of
sibling queues compete under their parent first (each with the share its queue would have after
admitting it), the winner represents the parent one level up, where it meets the winners of the
parent's siblings with the *parent's* share, and so on to the root. ``tournament_order`` runs it;
``share_path`` gives the share a head carries at each level.

Ordering uses the share a queue *would* have after admitting the job (as Kueue does), so a large job
does not jump ahead of a small one from a queue that borrows a little less.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

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

    Element ``k`` is what a head of ``queue`` carries in the tournament match under its ancestor at
    depth ``k`` (the root has depth 0): the share of that ancestor's child on the queue's path.
    """
    node = tree._node(queue)
    now = _now(tree)
    steps = tree._extra_along_path(node, request or {})
    return tuple(_share(tree, n, extra, now) for n, extra in reversed(steps) if n.parent is not None)


T = TypeVar("T")
E = TypeVar("E")

_Key = tuple[Any, ...]


class Contender(Generic[T]):
    """One leaf queue's head in a tournament, with its match key at every level precomputed.

    ``shares`` is the head's ``share_path``, or None when its queue is not in the tree (it competes
    after every tree's heads of its priority). ``tiebreak`` orders equals: (creation time, a unique
    sequence or id).
    """

    __slots__ = ("item", "keys", "queue", "top")

    def __init__(self, item: T, queue: str, priority: int, shares: tuple[float, ...] | None,
                 tiebreak: tuple[float, int | str]) -> None:
        self.item = item
        self.queue = queue
        self.keys: tuple[_Key, ...] = tuple((-priority, share, *tiebreak) for share in shares or ())
        """``keys[k]``: the key in the match under the ancestor at depth ``k`` (lower wins)."""
        self.top: _Key = (-priority, 0.0 if shares is not None else math.inf, *tiebreak)
        """The key between trees (a root borrows from nobody: share 0); also orders a leaf's own heads."""

    def key(self, depth: int) -> _Key:
        return self.keys[depth] if depth < len(self.keys) else self.top


def tournament_order(tree: QuotaTree, contenders: Sequence[Contender[T]]) -> list[T]:
    """The items in admission order: priority first, then Kueue's fair-sharing tournament, then FIFO.

    At every queue the best head of each child subtree meets the others by (higher priority, lower
    share of the child it comes from, older, sequence); the winner moves up. Repeating the
    tournament with the winner removed gives the next item, which is what merging the children's
    orders at every queue does: O(heads x depth x log). Priority comes first at every match, so the
    highest-priority head always wins overall. Different trees share no quota: their winners meet
    by priority, then FIFO; heads of unknown queues go after every tree's heads of the same priority.
    """
    at_leaf, stray = _by_leaf(tree, contenders)
    children: dict[_Node, list[_Node]] = {}
    seen: set[_Node] = set()
    roots: list[_Node] = []
    for leaf in at_leaf:
        below: _Node | None = None
        for n in leaf.path:
            if below is not None:
                children.setdefault(n, []).append(below)
            if n in seen:
                break
            seen.add(n)
            if n.parent is None:
                roots.append(n)
            below = n

    def order(root: _Node) -> list[Contender[T]]:
        """The root's subtree in order: at each queue, its own heads (a leaf's) and each child's
        order, merged by the key of the queue's depth. Children before parents with a stack, not
        recursion: a tree thousands of levels deep must not overflow the interpreter's stack."""
        done: dict[_Node, list[Contender[T]]] = {}
        stack: list[tuple[_Node, int, bool]] = [(root, 0, False)]
        while stack:
            node, depth, merge = stack.pop()
            below = children.get(node, ())
            if not merge:
                stack.append((node, depth, True))
                stack.extend((child, depth + 1, False) for child in below)
                continue
            streams: list[list[Contender[T]]] = []
            own = at_leaf.get(node)
            if own is not None:
                streams.append(sorted(own, key=lambda c: c.top))
            streams.extend(done.pop(child) for child in below)
            done[node] = _merge(streams, _key_at(depth))
        return done[root]

    top = [order(root) for root in roots]
    top.append(sorted(stray, key=lambda c: c.top))
    return [c.item for c in _merge(top, lambda c: c.top)]


def tournament_winner(tree: QuotaTree, contenders: Sequence[Contender[T]]) -> T | None:
    """The first item of ``tournament_order``, in O(heads x depth) without ordering the rest."""
    at_leaf, stray = _by_leaf(tree, contenders)
    best: dict[_Node, Contender[T]] = {}
    layers: dict[int, list[_Node]] = {}
    for leaf, own in at_leaf.items():
        best[leaf] = min(own, key=lambda c: c.top) if len(own) > 1 else own[0]
        layers.setdefault(len(leaf.path) - 1, []).append(leaf)
    winners = list(stray)
    for depth in range(max(layers, default=-1), -1, -1):
        for node in layers.get(depth, ()):
            c = best[node]
            parent = node.parent
            if parent is None:
                winners.append(c)
                continue
            rival = best.get(parent)
            if rival is None:
                best[parent] = c
                layers.setdefault(depth - 1, []).append(parent)
            elif c.keys[depth - 1] < rival.keys[depth - 1]:
                best[parent] = c
    return min(winners, key=lambda c: c.top).item if winners else None


def _by_leaf(tree: QuotaTree, contenders: Sequence[Contender[T]]
             ) -> tuple[dict[_Node, list[Contender[T]]], list[Contender[T]]]:
    at_leaf: dict[_Node, list[Contender[T]]] = {}
    stray: list[Contender[T]] = []
    for c in contenders:
        node = tree._nodes.get(c.queue)
        if node is None or len(c.keys) != len(node.path) - 1:
            stray.append(c)
        else:
            at_leaf.setdefault(node, []).append(c)
    return at_leaf, stray


def _key_at(depth: int) -> Callable[[Contender[Any]], _Key]:
    """A contender's key in the match under the ancestor at ``depth``."""
    return lambda c: c.key(depth)


def _merge(streams: list[list[E]], key: Callable[[E], _Key]) -> list[E]:
    """Repeated matches between the streams' fronts: take the best front by ``key``, advance it.

    Keys must be unique (they end with a unique tiebreak), so heap entries never compare items.
    """
    streams = [s for s in streams if s]
    if len(streams) <= 1:
        return streams[0] if streams else []
    heap = [(key(s[0]), i, 0) for i, s in enumerate(streams)]
    heapq.heapify(heap)
    out: list[E] = []
    while heap:
        _, i, j = heapq.heappop(heap)
        stream = streams[i]
        out.append(stream[j])
        if j + 1 < len(stream):
            heapq.heappush(heap, (key(stream[j + 1]), i, j + 1))
    return out


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
        pool = parent.reach[flavor]
        if borrowed > 0 and pool > 0:
            best = max(best, borrowed / pool)
    if best == 0.0:
        return 0.0
    return math.inf if node.weight == 0 else best / node.weight
