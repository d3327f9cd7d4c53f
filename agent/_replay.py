"""The replay backend: serve a recorded dump as if it were the node's NVML.

Fake (kwok) nodes have no GPUs, but the placement engine should still see real-shaped topology:
each fake node names a dump (annotation ``kubegang.io/replay-dump``) and may override the dump's
NVLink fabric registration (``kubegang.io/replay-fabric: <clusterUuid>/<cliqueId>``), so one GB200
tray dump can stand for every tray of several NVL72 racks. Dumps are parsed once per file
version and shared, because one replay agent may serve thousands of nodes.
"""

from __future__ import annotations

import copy
import re
import threading
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._dump import Dump, DumpFormatError, load_dump

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FABRIC_V3 = 0x3000028


class ReplayError(ValueError):
    """A replay dump or fabric override that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class FabricOverride:
    """``<clusterUuid>/<cliqueId>``, as the ``kubegang.io/replay-fabric`` annotation gives it."""

    cluster_uuid: str
    clique_id: int

    @classmethod
    def parse(cls, text: str) -> FabricOverride:
        uuid_text, sep, clique = text.strip().partition("/")
        try:
            if not sep:
                raise ValueError("missing '/'")
            parsed = uuidlib.UUID(uuid_text)
            clique_id = int(clique)
            if not 0 <= clique_id < 2**32:
                raise ValueError("clique id out of range")
        except ValueError as exc:
            raise ReplayError(
                f"replay fabric {text!r}: expected '<clusterUuid>/<cliqueId>' "
                f"(a UUID and an integer 0..4294967295): {exc}"
            ) from None
        return cls(str(parsed), clique_id)

    def fabric_info(self) -> dict[str, Any]:
        """A completed, successful v3 fabric registration with this cluster and clique."""
        return {
            "version": _FABRIC_V3,
            "clusterUuid": list(uuidlib.UUID(self.cluster_uuid).bytes),
            "cliqueId": self.clique_id,
            "state": 3,
            "status": 0,
            "healthMask": 0,
            "healthSummary": 1,
        }


def resolve_dump(directory: Path, name: str) -> Path:
    """``<directory>/<name>.nvml.json`` (or ``<directory>/<name>`` when that file exists)."""
    if not _NAME.match(name):
        raise ReplayError(f"replay dump name {name!r}: allowed are letters, digits, '.', '_', '-'")
    for candidate in (directory / f"{name}.nvml.json", directory / name):
        try:
            if candidate.is_file():
                return candidate
        except OSError as exc:  # a name too long for the file system, say
            raise ReplayError(f"replay dump {name!r}: {exc}") from None
    raise ReplayError(f"replay dump {name!r}: no {name}.nvml.json in {directory}")


class _DumpCache:
    """Parsed dumps keyed by (path, mtime), shared by every backend of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dumps: dict[Path, tuple[float, Dump]] = {}

    def get(self, path: Path) -> Dump:
        mtime = path.stat().st_mtime
        with self._lock:
            cached = self._dumps.get(path)
            if cached is not None and cached[0] == mtime:
                return cached[1]
        dump = load_dump(path)
        with self._lock:
            self._dumps[path] = (mtime, dump)
        return dump


_CACHE = _DumpCache()


class ReplayBackend:
    """Serves one dump, optionally with its fabric registration replaced."""

    def __init__(self, path: Path, fabric: FabricOverride | None = None, node_name: str | None = None) -> None:
        self.path = path
        self.fabric = fabric
        self.node_name = node_name
        """When one dump serves many fake nodes, each node's GPUs get UUIDs of their own (derived
        from the node name), as real GPUs would: the topology refuses one GPU on two nodes."""
        try:
            _CACHE.get(path)  # fail now, naming the file, rather than at the first poll
        except (OSError, DumpFormatError) as exc:
            raise ReplayError(str(exc)) from None

    def read(self) -> Dump:
        try:
            dump = _CACHE.get(self.path)
        except (OSError, DumpFormatError) as exc:
            return {"init": {"error": "ReplayDumpUnreadable", "msg": str(exc)}, "devices": []}
        if self.fabric is None and self.node_name is None:
            return dump
        # Copy on write: the cached dump is shared by every node replaying it.
        patched = copy.copy(dump)
        patched["devices"] = []
        for device in dump["devices"]:
            device = dict(device) if isinstance(device, dict) else device
            if isinstance(device, dict) and "handle" not in device:
                if self.fabric is not None:
                    device.pop("GpuFabricInfo", None)
                    device["GpuFabricInfoV"] = self.fabric.fabric_info()
                if self.node_name is not None and isinstance(device.get("UUID"), str):
                    device["UUID"] = "GPU-" + str(
                        uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{self.node_name}/{device['UUID']}")
                    )
            patched["devices"].append(device)
        return patched

    def version(self) -> int | None:
        """The dump file's modification time: the fabric override and node name are fixed for the
        life of the backend (a change of either starts a new one)."""
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None  # unreadable: read() reports it

    def close(self) -> None:
        return None
