"""The agent process: which nodes it serves, with which backend, and its health endpoint.

Real mode serves one node (``--node-name``) from NVML. Replay mode serves every node matching a
label selector (kwok nodes), each from the dump its ``kubegang.io/replay-dump`` annotation names,
with the optional ``kubegang.io/replay-fabric`` override; the node list is re-read every poll
interval so nodes that come and go (and annotation edits) are followed. A node with a missing or
bad annotation is logged once and skipped, never fatal to the others.

Writes happen only on change, so a GPUNode that someone deletes would otherwise stay gone until the
resync timer; a watch on GPUNode deletions tells the node's publisher to write at its next poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubegang.backoff import Backoff
from kubegang.shapes import REPLAY_DUMP_ANNOTATION, REPLAY_FABRIC_ANNOTATION

from ._backend import Backend
from ._kube import ClusterSink, NodeInfo
from ._metrics import AgentMetrics
from ._publisher import NodePublisher
from ._replay import FabricOverride, ReplayBackend, ReplayError, resolve_dump
from ._settings import AgentSettings

log = logging.getLogger(__name__)


@dataclass
class _Served:
    key: tuple[str, str | None, str]
    """(dump, fabric, node uid): a change of any starts a fresh publisher. The uid matters
    because a node deleted and created again under the same name has lost the labels the old
    publisher believes it wrote."""
    publisher: NodePublisher
    task: asyncio.Task[None]


class Agent:
    """Runs one :class:`NodePublisher` per served node."""

    def __init__(
        self,
        settings: AgentSettings,
        sink: ClusterSink,
        metrics: AgentMetrics,
        *,
        real_backend: Callable[[], Backend] | None = None,
    ) -> None:
        self.settings = settings
        self._sink = sink
        self._metrics = metrics
        self._real_backend = real_backend
        self._served: dict[str, _Served] = {}
        self._complained: dict[str, str] = {}
        self._last_discovery: float | None = None
        self.watch_retry_s = 5.0
        """Pause before a failed or ended deletion watch is restarted."""

    def healthy(self) -> bool:
        """True while the loops are alive: every served node polled recently (API write errors do
        not count: restarting the agent would not fix the API server)."""
        horizon = 3 * self.settings.poll_interval_s + 5
        now = time.monotonic()
        if self.settings.replay_dir is not None and (
            self._last_discovery is None or now - self._last_discovery > horizon
        ):
            return False
        return all(
            s.publisher.last_poll is not None and now - s.publisher.last_poll < horizon for s in self._served.values()
        )

    def _start(self, node: str, key: tuple[str, str | None, str], backend: Backend) -> None:
        publisher = NodePublisher(node, backend, self._sink, self.settings, self._metrics)
        task = asyncio.create_task(publisher.run(), name=f"publish-{node}")
        self._served[node] = _Served(key, publisher, task)
        log.info("serving node %s (%s)", node, key[0])

    async def _stop(self, node: str) -> None:
        served = self._served.pop(node)
        served.task.cancel()
        await asyncio.gather(served.task, return_exceptions=True)
        await asyncio.to_thread(served.publisher.backend.close)
        self._metrics.forget(node)

    def _complain_once(self, node: str, message: str) -> None:
        if self._complained.get(node) != message:
            self._complained[node] = message
            log.error("node %s not served: %s", node, message)

    async def _sync_replay_nodes(self, nodes: list[NodeInfo]) -> None:
        assert self.settings.replay_dir is not None
        wanted: dict[str, tuple[tuple[str, str | None, str], Backend]] = {}
        for node in nodes:
            dump_name = node.annotations.get(REPLAY_DUMP_ANNOTATION)
            fabric_text = node.annotations.get(REPLAY_FABRIC_ANNOTATION)
            if not dump_name:
                self._complain_once(node.name, f"no {REPLAY_DUMP_ANNOTATION} annotation")
                continue
            key = (dump_name, fabric_text, node.uid)
            served = self._served.get(node.name)
            if served is not None and served.key == key:
                wanted[node.name] = (key, served.publisher.backend)
                continue
            try:
                fabric = FabricOverride.parse(fabric_text) if fabric_text else None
                backend: Backend = ReplayBackend(
                    resolve_dump(self.settings.replay_dir, dump_name), fabric, node_name=node.name
                )
            except ReplayError as exc:
                self._complain_once(node.name, str(exc))
                continue
            except Exception as exc:  # one node's dump or annotation must not stop the others'
                self._complain_once(node.name, f"cannot replay {dump_name!r}: {exc!r}")
                continue
            self._complained.pop(node.name, None)
            wanted[node.name] = (key, backend)
        for name in [n for n, s in self._served.items() if n not in wanted or wanted[n][0] != s.key]:
            await self._stop(name)
        for name, (key, backend) in wanted.items():
            if name not in self._served:
                self._start(name, key, backend)

    async def _watch_deletions(self) -> None:
        """Forever: a deleted GPUNode of a served node is written again at its next poll."""
        # Jittered (kubegang.backoff): every agent of the DaemonSet loses the watch when the API server
        # restarts, and they must not all come back in the same second.
        backoff = Backoff(initial_seconds=self.watch_retry_s,
                          max_seconds=max(self.watch_retry_s, self.settings.resync_interval_s))
        last_error = ""
        while True:
            try:
                async for name in self._sink.deleted_gpunodes(self.settings.node_name):
                    backoff.reset()
                    served = self._served.get(name)
                    if served is not None:
                        log.info("GPUNode %s was deleted; it is recreated at the next poll", name)
                        served.publisher.forget_written()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Without the watch (no list/watch RBAC, API down) deletions are repaired by resync;
                # say so once per kind of failure, and back off up to the resync interval.
                if str(exc) != last_error:
                    last_error = str(exc)
                    log.warning("watching GPUNode deletions failed (resync repairs them): %s", exc)
            await backoff.sleep()

    async def run(self) -> None:
        """Serve until cancelled."""
        watcher = asyncio.create_task(self._watch_deletions(), name="watch-gpunode-deletions")
        try:
            if self.settings.node_name is not None:
                factory = self._real_backend
                if factory is None:
                    raise ValueError("real mode needs a backend factory")
                backend = await asyncio.to_thread(factory)
                self._start(self.settings.node_name, ("nvml", None, ""), backend)
                await self._served[self.settings.node_name].task
                return
            assert self.settings.nodes_from_label is not None
            while True:
                try:
                    nodes = await self._sink.list_nodes(self.settings.nodes_from_label)
                except Exception as exc:
                    log.warning("listing nodes (%s) failed: %s", self.settings.nodes_from_label, exc)
                else:
                    await self._sync_replay_nodes(nodes)
                    self._last_discovery = time.monotonic()
                await asyncio.sleep(self.settings.poll_interval_s)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            for name in list(self._served):
                await self._stop(name)
