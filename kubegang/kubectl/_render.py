"""Output: aligned tables for people, ``-o json|yaml`` for scripts, colour only on a terminal.

Every command builds one JSON-ready report (the machine form) and a list of lines from it (the human
form), so the two never say different things.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml


class Output(enum.StrEnum):
    """``-o``: how a report is printed."""

    TEXT = "text"
    JSON = "json"
    YAML = "yaml"


class Style:
    """ANSI colour when writing to a terminal (and ``NO_COLOR`` is unset), plain text otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.on = stream.isatty() and not os.environ.get("NO_COLOR")

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.on else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def bad(self, text: str) -> str:
        return self._wrap("31", text)

    def good(self, text: str) -> str:
        return self._wrap("32", text)

    def warn(self, text: str) -> str:
        return self._wrap("33", text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> list[str]:
    """``kubectl get``-style columns: upper-case headers, two spaces between columns."""
    cells = [[str(h).upper() for h in headers], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def gpus(value: float) -> str:
    """GPUs as people read them: whole numbers without a point, shares with their decimals."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def age(since: dt.datetime | None, now: dt.datetime) -> str:
    """``kubectl``'s short age (``42s``, ``5m``, ``3h``, ``2d``)."""
    if since is None:
        return "?"
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def emit(report: dict[str, Any], lines: list[str], output: Output, stream: TextIO | None = None) -> None:
    """Print ``report`` as JSON/YAML, or the human ``lines`` (to ``sys.stdout`` as it is at the call)."""
    stream = stream or sys.stdout
    if output is Output.JSON:
        stream.write(json.dumps(report, indent=2, default=str) + "\n")
    elif output is Output.YAML:
        stream.write(yaml.safe_dump(json.loads(json.dumps(report, default=str)), sort_keys=False))
    else:
        stream.write("\n".join(lines) + "\n")
