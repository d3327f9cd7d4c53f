"""The NVML dump format: one JSON document per node, every call's value or the error it raised.

The real backend produces it, the replay backend reads it, ``--dump-nvml`` writes it, and the
parser (``_snapshot``) is the only code that interprets it. Keeping one format for all three means
a capture from real hardware is, byte for byte, a replay fixture, and the code that turns readings
into a GPUNode is exercised identically in production and in tests.

A failed call is recorded as ``{"error": "NVMLError_NotSupported", "code": 3, "msg": "Not
Supported"}`` (``code`` only for NVML errors), exactly as in the H200 capture.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, TypeGuard

Dump = dict[str, Any]
"""A node's readings in the dump format (``devices``: one dict per GPU)."""


class NvmlReturn(enum.IntEnum):
    """The NVML return codes (``nvmlReturn_t``) the agent acts on; any other is only recorded.

    Decisions are made on the code an error entry carries, never on its text: messages differ
    between driver and nvidia-ml-py versions, the codes are NVML's ABI."""

    TIMEOUT = 10
    FUNCTION_NOT_FOUND = 13
    """A driver older than the call (the legacy fabric call then answers)."""
    GPU_IS_LOST = 15
    """The GPU has fallen off the bus or has otherwise become inaccessible."""
    ARGUMENT_VERSION_MISMATCH = 25


def error_entry(exc: BaseException) -> dict[str, Any]:
    """The dump's record of a call that raised ``exc``."""
    entry: dict[str, Any] = {"error": type(exc).__name__, "msg": str(exc)}
    code = getattr(exc, "value", None)
    if isinstance(code, int):
        entry = {"code": code, **entry}
    return entry


def is_error(value: object) -> TypeGuard[dict[str, Any]]:
    """Whether a dump value records a failed call."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("error"), str)
        and set(value)
        <= {
            "error",
            "code",
            "msg",
        }
    )


def describe_error(value: dict[str, Any]) -> str:
    """``NVMLError_NotSupported: Not Supported`` for an error entry."""
    msg = value.get("msg")
    return f"{value['error']}: {msg}" if msg else str(value["error"])


class DumpFormatError(ValueError):
    """A file that is not an NVML dump; the message names the file and what is wrong."""


def load_dump(path: Path) -> Dump:
    """Read a dump file; raise :class:`DumpFormatError` naming the file when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        # ValueError covers JSON errors, undecodable bytes and integers beyond Python's digit limit.
        raise DumpFormatError(f"{path}: cannot read NVML dump: {exc!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise DumpFormatError(f"{path}: not an NVML dump (expected an object with a 'devices' list)")
    return data


def save_dump(dump: Dump, path: Path) -> None:
    """Write a dump as stable, diff-friendly JSON."""
    path.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")
