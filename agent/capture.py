"""One-shot capture of the local NVML in the fixture format: ``python -m kubegang.agent.capture FILE``
(the same as ``kubegang-agent --dump-nvml FILE``).

Self-contained on purpose: it needs only nvidia-ml-py and the driver, never a cluster, so it can be
run on any GPU machine and the file it writes becomes a replay fixture as is.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ._dump import Dump, save_dump
from ._infiniband import DEFAULT_ROOT
from ._nvml import NvmlBackend


def capture(path: Path, *, infiniband_root: Path = DEFAULT_ROOT) -> Dump:
    """Read every GPU once (no XID watch: a one-shot capture cannot see events) and write ``path``."""
    backend = NvmlBackend(infiniband_root=infiniband_root, watch_events=False)
    try:
        dump = backend.read()
    finally:
        backend.close()
    save_dump(dump, path)
    return dump


def summary(dump: Dump) -> str:
    """One line per GPU, for the person running the capture."""
    lines = [f"driver {dump.get('driver')}, {len(dump.get('devices') or [])} GPUs"]
    if "init" in dump:
        lines.append(f"NVML unavailable: {dump['init']}")
    for device in dump.get("devices") or []:
        lines.append(f"  gpu {device.get('index')}: {device.get('Name')} {device.get('UUID')}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubegang.agent.capture", description=__doc__)
    parser.add_argument("file", type=Path, help="where to write the dump (JSON)")
    parser.add_argument("--infiniband-root", type=Path, default=DEFAULT_ROOT, help="sysfs InfiniBand class")
    args = parser.parse_args(argv)
    dump = capture(args.file, infiniband_root=args.infiniband_root)
    print(summary(dump), file=sys.stderr)
    return 0 if "init" not in dump else 1


if __name__ == "__main__":
    sys.exit(main())
