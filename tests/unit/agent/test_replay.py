"""Replay mode: dumps chosen by node annotation, fabric override, one process for many nodes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kubegang.agent import FabricOverride, ReplayBackend, ReplayError, build_status, parse_dump, resolve_dump
from kubegang.agent.__main__ import main
from kubegang.agent._agent import Agent
from kubegang.agent._kube import NodeInfo
from kubegang.agent._metrics import AgentMetrics
from kubegang.agent._settings import AgentSettings
from kubegang.shapes import REPLAY_DUMP_ANNOTATION, REPLAY_FABRIC_ANNOTATION

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RACK = "0f3e2d1c-b0a9-4887-a665-544332211000"


def test_fabric_override_makes_any_tray_a_member_of_the_named_domain(fixtures_dir: Path) -> None:
    path = resolve_dump(fixtures_dir, "gb200-degraded-fabric")
    backend = ReplayBackend(path, FabricOverride.parse(f"{RACK}/17"))
    status = build_status(parse_dump(backend.read()), now=NOW)
    assert status.nvlink_domain is not None and status.nvlink_domain.id == f"{RACK}.17"
    # The shared cached dump is untouched.
    assert build_status(parse_dump(ReplayBackend(path).read()), now=NOW).nvlink_domain is None


@pytest.mark.parametrize("text", ["", "abc/1", f"{RACK}", f"{RACK}/-1", f"{RACK}/x", f"{RACK}/4294967296"])
def test_bad_fabric_override_names_the_format(text: str) -> None:
    with pytest.raises(ReplayError, match="<clusterUuid>/<cliqueId>"):
        FabricOverride.parse(text)


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "", ".hidden"])
def test_dump_names_cannot_escape_the_directory(fixtures_dir: Path, name: str) -> None:
    with pytest.raises(ReplayError, match="allowed are"):
        resolve_dump(fixtures_dir, name)


def test_missing_and_malformed_dumps_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match=r"no nope\.nvml\.json"):
        resolve_dump(tmp_path, "nope")
    (tmp_path / "bad.nvml.json").write_text(json.dumps({"devices": 3}))
    with pytest.raises(ReplayError, match="not an NVML dump"):
        ReplayBackend(resolve_dump(tmp_path, "bad"))


class FakeCluster:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = nodes
        self.status: dict[str, Mapping[str, Any]] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.created: list[str] = []
        self.deletions: asyncio.Queue[str] = asyncio.Queue()
        self.watched: list[str | None] = []

    async def create_gpunode(self, name: str) -> None:
        self.created.append(name)

    async def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.status[name] = status

    def delete(self, name: str) -> None:
        self.status.pop(name, None)
        self.deletions.put_nowait(name)

    async def deleted_gpunodes(self, name: str | None = None) -> AsyncIterator[str]:
        self.watched.append(name)
        while True:
            deleted = await self.deletions.get()
            if name is None or deleted == name:
                yield deleted

    async def patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        current = self.labels.setdefault(name, {})
        current.update({k: v for k, v in labels.items() if v is not None})
        for k in [k for k, v in labels.items() if v is None]:
            current.pop(k, None)

    async def list_nodes(self, selector: str) -> list[NodeInfo]:
        assert selector == "type=kwok"
        return list(self.nodes)


def node(name: str, dump: str | None, fabric: str | None = None) -> NodeInfo:
    annotations = {}
    if dump:
        annotations[REPLAY_DUMP_ANNOTATION] = dump
    if fabric:
        annotations[REPLAY_FABRIC_ANNOTATION] = fabric
    return NodeInfo(name, annotations)


async def wait_for(predicate: Any) -> None:
    """Poll ``predicate`` (the agent's loops give no event to wait on) for up to 5 s."""
    async with asyncio.timeout(5.0):
        for _ in iter(predicate, True):
            await asyncio.sleep(0.01)


async def test_one_process_serves_every_annotated_node(fixtures_dir: Path) -> None:
    cluster = FakeCluster(
        [
            node("tray-0", "gb200-nvl72-tray", f"{RACK}/1"),
            node("tray-1", "gb200-nvl72-tray", f"{RACK}/1"),
            node("hgx-0", "hgx-h100-8gpu"),
            node("plain", None),
            node("broken", "gb200-nvl72-tray", "not-a-fabric"),
        ]
    )
    settings = AgentSettings(replay_dir=fixtures_dir, nodes_from_label="type=kwok", poll_interval_s=0.05,
                             resync_interval_s=1, metrics_port=0)  # fmt: skip
    agent = Agent(settings, cluster, AgentMetrics())
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: set(cluster.labels) == {"tray-0", "tray-1", "hgx-0"})
        assert cluster.labels["tray-0"]["kubegang.io/nvlink-domain"] == f"{RACK}.1"
        assert cluster.labels["hgx-0"]["nvidia.com/gpu.count"] == "8"
        assert "kubegang.io/nvlink-domain" not in cluster.labels["hgx-0"]
        await wait_for(agent.healthy)

        # A node leaves, another changes its fabric annotation.
        cluster.nodes = [node("tray-0", "gb200-nvl72-tray", f"{RACK}/2"), node("hgx-0", "hgx-h100-8gpu")]
        await wait_for(lambda: cluster.labels["tray-0"]["kubegang.io/nvlink-domain"] == f"{RACK}.2")
        await wait_for(lambda: set(agent._served) == {"tray-0", "hgx-0"})
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert agent._served == {}


async def test_a_deleted_gpunode_is_written_again_without_waiting_for_resync(fixtures_dir: Path) -> None:
    cluster = FakeCluster([node("hgx-0", "hgx-h100-8gpu"), node("hgx-1", "hgx-h100-8gpu")])
    settings = AgentSettings(replay_dir=fixtures_dir, nodes_from_label="type=kwok", poll_interval_s=0.05,
                             resync_interval_s=3600, metrics_port=0)  # fmt: skip
    agent = Agent(settings, cluster, AgentMetrics())
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: set(cluster.status) == {"hgx-0", "hgx-1"})
        assert sorted(cluster.created) == ["hgx-0", "hgx-1"] and cluster.watched == [None]
        cluster.delete("hgx-0")
        await wait_for(lambda: "hgx-0" in cluster.status)
        assert sorted(cluster.created) == ["hgx-0", "hgx-0", "hgx-1"]  # the other node wrote nothing
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_node_created_again_under_the_same_name_gets_its_labels_back(fixtures_dir: Path) -> None:
    first = node("hgx-0", "hgx-h100-8gpu")
    cluster = FakeCluster([NodeInfo(first.name, first.annotations, uid="uid-1")])
    settings = AgentSettings(replay_dir=fixtures_dir, nodes_from_label="type=kwok", poll_interval_s=0.05,
                             resync_interval_s=3600, metrics_port=0)  # fmt: skip
    agent = Agent(settings, cluster, AgentMetrics())
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: "hgx-0" in cluster.labels)
        # Deleted and registered again: same name and annotations, new uid, no labels.
        del cluster.labels["hgx-0"]
        cluster.nodes = [NodeInfo(first.name, first.annotations, uid="uid-2")]
        await wait_for(lambda: cluster.labels.get("hgx-0", {}).get("nvidia.com/gpu.count") == "8")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failing_deletion_watch_is_retried_and_never_stops_publishing(
    fixtures_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class NoWatch(FakeCluster):
        async def deleted_gpunodes(self, name: str | None = None) -> AsyncIterator[str]:
            self.watched.append(name)
            raise RuntimeError("gpunodes is forbidden: cannot watch")
            yield name  # pragma: no cover (makes this an async generator)

    cluster = NoWatch([node("hgx-0", "hgx-h100-8gpu")])
    settings = AgentSettings(replay_dir=fixtures_dir, nodes_from_label="type=kwok", poll_interval_s=0.05,
                             resync_interval_s=3600, metrics_port=0)  # fmt: skip
    agent = Agent(settings, cluster, AgentMetrics())
    agent.watch_retry_s = 0.01
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: len(cluster.watched) >= 3 and "hgx-0" in cluster.status)
        await wait_for(agent.healthy)
        failures = [r for r in caplog.records if "watching GPUNode deletions failed" in r.getMessage()]
        assert len(failures) == 1, "the same failure is reported once, not at every retry"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_cli_help_and_print_once(fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "--replay-dir" in capsys.readouterr().out

    rc = main(["--once", "--print", "--replay-dir", str(fixtures_dir), "--replay-dump", "gb200-nvl72-tray",
               "--replay-fabric", f"{RACK}/3", "--node-name", "tray-9"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["gpunode"]["metadata"]["name"] == "tray-9" and out["gpunode"]["kind"] == "GPUNode"
    assert out["gpunode"]["status"]["nvlinkDomain"]["id"] == f"{RACK}.3"
    assert out["labels"]["nvidia.com/gpu.clique"] == f"{RACK}.3"


def test_cli_refuses_bad_settings_with_a_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--replay-dir", str(tmp_path), "--metrics-port", "0"]) == 2
    assert "nodes_from_label" in capsys.readouterr().err
    assert main(["--once", "--print", "--replay-dump", "x", "--replay-fabric", "zzz"]) == 2


async def test_a_dump_or_annotation_that_cannot_be_read_stops_no_other_node(fixtures_dir: Path, tmp_path: Path) -> None:
    """docs/agent.md: a bad annotation is logged once and skipped; it used to end the whole agent."""
    import shutil

    shutil.copy(fixtures_dir / "hgx-h100-8gpu.nvml.json", tmp_path / "good.nvml.json")
    good = (fixtures_dir / "hgx-h100-8gpu.nvml.json").read_text()
    (tmp_path / "latin1.nvml.json").write_bytes(good.replace('"devices"', '"d\u00e9vices", "devices"', 1)
                                               .encode("latin-1"))
    (tmp_path / "deep.nvml.json").write_text('{"devices": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "hugeint.nvml.json").write_text('{"devices": [], "x": ' + "9" * 5000 + "}")
    cluster = FakeCluster([node("good", "good"), node("latin1", "latin1"), node("deep", "deep"),
                           node("hugeint", "hugeint"), node("longname", "a" * 300)])
    settings = AgentSettings(replay_dir=tmp_path, nodes_from_label="type=kwok", poll_interval_s=0.05,
                             resync_interval_s=1, metrics_port=0)  # fmt: skip
    agent = Agent(settings, cluster, AgentMetrics())
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: set(cluster.labels) == {"good"})
        await wait_for(agent.healthy)
        assert not task.done() and set(agent._served) == {"good"}
        assert set(agent._complained) == {"latin1", "deep", "hugeint", "longname"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)



async def test_healthz_follows_the_polls_not_the_api_server(fixtures_dir: Path) -> None:
    """docs/agent.md: ``/healthz`` is healthy while every served node polled within three poll
    intervals (plus 5 s of slack), and API errors do not count: a restart would not fix the API server."""

    class Refusing(FakeCluster):
        async def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
            raise RuntimeError("the server is currently unable to handle the request")

    cluster = Refusing([node("hgx-0", "hgx-h100-8gpu")])
    # One poll at start, the next 100 s later: the test moves the last poll back by hand.
    settings = AgentSettings(replay_dir=fixtures_dir, nodes_from_label="type=kwok", poll_interval_s=100,
                             resync_interval_s=3600, metrics_port=0)  # fmt: skip
    agent = Agent(settings, cluster, AgentMetrics())
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: "hgx-0" in agent._served and agent._served["hgx-0"].publisher.last_poll is not None)
        assert "hgx-0" not in cluster.status  # its status write failed
        assert agent.healthy()

        publisher = agent._served["hgx-0"].publisher
        polled = publisher.last_poll
        assert polled is not None
        publisher.last_poll = polled - (3 * settings.poll_interval_s + 5) + 1  # 3 intervals + 5 s, less 1 s
        assert agent.healthy()
        publisher.last_poll = polled - (3 * settings.poll_interval_s + 5) - 1
        assert not agent.healthy()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_deletion_watch_backs_off_as_documented(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agent.md: a failed or ended deletion watch reconnects after a delay drawn between 0.5 s
    and a ceiling that starts at 5 s and doubles per consecutive failure up to the resync interval;
    an event resets it."""
    import kubegang.agent._agent as agent_module
    from kubegang.backoff import Backoff

    made: list[Backoff] = []
    ceilings: list[float] = []

    class Recorded(Backoff):
        def __post_init__(self) -> None:
            super().__post_init__()
            made.append(self)

        async def sleep(self) -> float:  # record the ceiling of each wait, and do not wait
            ceilings.append(self.ceiling())
            self.next_delay()
            await asyncio.sleep(0)
            return 0.0

    monkeypatch.setattr(agent_module, "Backoff", Recorded)
    failing = {"left": 4}

    class Flaky(FakeCluster):
        async def deleted_gpunodes(self, name: str | None = None) -> AsyncIterator[str]:
            self.watched.append(name)
            if failing["left"] > 0:
                failing["left"] -= 1
                raise RuntimeError("connection reset by peer")
            async for deleted in super().deleted_gpunodes(name):
                yield deleted
                return  # one event, then the stream ends: the backoff starts again from 5 s

    cluster = Flaky([node("hgx-0", "hgx-h100-8gpu")])
    settings = AgentSettings(replay_dir=fixtures_dir, nodes_from_label="type=kwok", poll_interval_s=0.05,
                             resync_interval_s=30, metrics_port=0)  # fmt: skip
    agent = Agent(settings, cluster, AgentMetrics())
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: len(cluster.watched) >= 5 and "hgx-0" in cluster.status)
        (backoff,) = made
        assert (backoff.floor, backoff.initial_seconds, backoff.max_seconds) == (0.5, 5.0, 30)
        assert ceilings[:4] == [5.0, 10.0, 20.0, 30]  # doubling, capped at the resync interval
        cluster.delete("hgx-0")  # an event on the fifth watch, which then ends
        await wait_for(lambda: len(ceilings) >= 5)
        assert ceilings[4] == 5.0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
