"""Topology levels, narrowest first.

One ordered vocabulary is shared by the API (``GPUJob.spec.topology``), the topology graph, the
placement engine and the benchmarks, so that "narrower than" means the same thing everywhere.
``gpu`` is the leaf of the graph but not a level a gang can ask for (a gang is at least one pod,
and a pod lives on one node), hence ``REQUESTABLE_LEVELS`` starts at ``node``.
"""

from __future__ import annotations

import enum


class Level(enum.IntEnum):
    """A topology level; a smaller value is a narrower domain."""

    GPU = 0
    NODE = 1
    NVLINK = 2
    LEAF = 3
    SPINE = 4
    BLOCK = 5
    CLUSTER = 6

    @property
    def label(self) -> str:
        """The name users write in manifests (``node``, ``nvlink``, ...)."""
        return self.name.lower()

    @classmethod
    def parse(cls, name: str) -> Level:
        """The level called ``name``; a ValueError lists the allowed names otherwise."""
        try:
            return cls[name.upper()]
        except KeyError:
            allowed = ", ".join(level.label for level in cls)
            raise ValueError(f"unknown topology level {name!r}; allowed: {allowed}") from None


REQUESTABLE_LEVELS: tuple[Level, ...] = tuple(level for level in Level if level is not Level.GPU)
"""Levels a GPUJob may name in ``topology.required`` / ``topology.preferred``."""
