"""One reading of a nested figure in a results dictionary, for every e2e report."""

from __future__ import annotations

from typing import Any


def dig(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...``, or None where a key is missing or a level is not a dictionary."""
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d
