"""InfiniBand / RoCE HCAs from sysfs (``/sys/class/infiniband``).

NVML knows nothing of the network, and the fabric level above the node (which leaf switch an HCA
plugs into) is not visible from the host; what the host does know is which HCAs exist, their port
GUIDs (what a subnet manager's topology dump is keyed by), state, rate and link layer. The root is
configurable so tests read a fake tree. A file that cannot be read leaves that field null; a
missing ``/sys/class/infiniband`` means the node has no HCAs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._dump import error_entry

DEFAULT_ROOT = Path("/sys/class/infiniband")


def _read(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def _state(raw: str | None) -> str | None:
    # "4: ACTIVE" → "ACTIVE"
    return raw.split(":", 1)[1].strip() if raw and ":" in raw else raw


def _port_guid(port_dir: Path) -> str | None:
    # The port GUID is the interface id: the low 64 bits of GID 0 (fe80::<guid>).
    gid = _read(port_dir / "gids" / "0")
    if gid is None:
        return None
    groups = gid.split(":")
    return ":".join(groups[-4:]) if len(groups) == 8 else None


def _port_number(path: Path) -> int:
    return int(path.name) if path.name.isdigit() else -1


def read_hcas(root: Path = DEFAULT_ROOT) -> list[dict[str, Any]] | dict[str, Any]:
    """Every HCA under ``root`` in the dump format, or an error entry if ``root`` is unreadable."""
    if not root.exists():
        return []
    try:
        devices = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError as exc:
        return error_entry(exc)
    hcas: list[dict[str, Any]] = []
    for device in devices:
        ports_dir = device / "ports"
        try:
            port_dirs = sorted((p for p in ports_dir.iterdir() if p.name.isdigit()), key=_port_number)
        except OSError:
            port_dirs = []
        hcas.append(
            {
                "name": device.name,
                "nodeGuid": _read(device / "node_guid"),
                "ports": [
                    {
                        "port": _port_number(port),
                        "guid": _port_guid(port),
                        "state": _state(_read(port / "state")),
                        "rate": _read(port / "rate"),
                        "linkLayer": _read(port / "link_layer"),
                    }
                    for port in port_dirs
                ],
            }
        )
    return hcas
