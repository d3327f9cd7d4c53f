"""What the publisher needs from a source of readings, whether real NVML or a recorded dump."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from ._dump import Dump


class Backend(Protocol):
    """A source of one node's readings in the dump format.

    ``read`` blocks (NVML calls are synchronous C calls); callers on an event loop run it in a
    thread (``asyncio.to_thread``). It must not raise for a failed call: failures are recorded in
    the dump, where the parser turns them into ``status.unknown``.
    """

    def read(self) -> Dump:
        """The node's current readings."""
        ...

    def version(self) -> Hashable | None:
        """A token that changes whenever ``read`` could return something new, or None when the
        backend cannot tell (live NVML: every read is new). A publisher whose writes are up to date
        skips reading, parsing and comparing while the token stays the same: one replay agent serves
        a thousand nodes whose dumps never change, and parsing each every poll cost a CPU core."""
        ...

    def close(self) -> None:
        """Release what ``read`` holds (NVML handle, event thread)."""
        ...
