"""Topology level names as they appear in manifests, for the API models and their CEL rules.

The order comes from :mod:`kubegang.levels`; this module only turns it into a validated string type
and into a CEL map (level name → rank) so the schema compares levels exactly as Python does.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from kubegang.levels import REQUESTABLE_LEVELS, Level

LEVEL_NAMES: tuple[str, ...] = tuple(level.label for level in REQUESTABLE_LEVELS)
"""Level names a manifest may use, narrowest first."""

LEVEL_ORDER = " < ".join(LEVEL_NAMES)
"""Human-readable order for error messages."""

CEL_LEVEL_RANK = "{" + ", ".join(f"'{level.label}': {int(level)}" for level in REQUESTABLE_LEVELS) + "}"
"""A CEL map literal from level name to rank (smaller is narrower)."""


def _requestable(name: str) -> str:
    if name not in LEVEL_NAMES:
        raise ValueError(f"unknown topology level {name!r}; allowed: {', '.join(LEVEL_NAMES)}")
    return name


LevelName = Annotated[
    str,
    AfterValidator(_requestable),
    WithJsonSchema({"type": "string", "enum": list(LEVEL_NAMES)}),
]
"""A requestable topology level name (``node``, ``nvlink``, ``leaf``, ``spine``, ``block``, ``cluster``)."""


def rank(name: str) -> Level:
    """The :class:`~kubegang.levels.Level` called ``name``."""
    return Level.parse(name)
