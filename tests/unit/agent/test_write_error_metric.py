"""``kubegang_agent_api_write_errors_total{kind}`` (docs/metrics.md) counts each failed API write.

The path is the production one: :class:`NodePublisher` over :class:`KubeSink` over a stand-in for
lightkube's AsyncClient that fails the way the real client does (an ``ApiError`` built from the API
server's Status answer, or a transport error of ``httpx2``, lightkube's HTTP library). The counter
is read by its exposed name from the agent's registry, as Prometheus scrapes it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx2
import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from prometheus_client import generate_latest

from kubegang.agent._dump import Dump
from kubegang.agent._kube import GPUNodeResource, KubeSink
from kubegang.agent._metrics import AgentMetrics
from kubegang.agent._publisher import NodePublisher
from kubegang.agent._settings import AgentSettings

Load = Callable[[str], dict[str, Any]]
ERRORS = "kubegang_agent_api_write_errors_total"
WRITES = "kubegang_agent_api_writes_total"


def api_error(code: int, method: str = "PATCH") -> ApiError:
    """What lightkube raises for a non-2xx answer: built from the Status body the API server sends."""
    request = httpx2.Request(method, "https://apiserver.invalid/apis/kubegang.io/v1alpha1/gpunodes/n1")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": f"HTTP {code}"}
    return ApiError(request=request, response=httpx2.Response(code, json=body, request=request))


def connect_error() -> httpx2.ConnectError:
    return httpx2.ConnectError("connection refused",
                              request=httpx2.Request("PATCH", "https://apiserver.invalid/api/v1/nodes/n1"))


class FailingClient:
    """The AsyncClient calls KubeSink makes; ``fail[op]`` lists the exceptions the next calls raise
    (``op``: ``get_node``, ``create``, ``patch_status``, ``patch_labels``)."""

    def __init__(self) -> None:
        self.fail: dict[str, list[Exception]] = {}
        self.calls: list[str] = []

    def _maybe_fail(self, op: str) -> None:
        self.calls.append(op)
        pending = self.fail.get(op)
        if pending:
            raise pending.pop(0)

    async def get(self, resource: Any, name: str) -> Any:
        assert resource is Node, resource  # a GPUNode is read only after a 409 on create
        self._maybe_fail("get_node")
        return Node(metadata=ObjectMeta(name=name, uid="uid-1"))

    async def create(self, obj: Any, field_manager: str | None = None) -> Any:
        self._maybe_fail("create")
        return obj

    async def patch(self, resource: Any, name: str, body: dict[str, Any], **_: Any) -> Any:
        self._maybe_fail("patch_status" if resource is GPUNodeResource.Status else "patch_labels")
        return None


class StaticBackend:
    def __init__(self, dump: Dump) -> None:
        self.dump = dump

    def read(self) -> Dump:
        return copy.deepcopy(self.dump)

    def version(self) -> None:
        return None  # read at every poll

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)

    def mono(self) -> float:
        return self.t


def make_publisher(load: Load) -> tuple[NodePublisher, FailingClient, AgentMetrics, Clock]:
    client, metrics, clock = FailingClient(), AgentMetrics(), Clock()
    settings = AgentSettings(node_name="n1", poll_interval_s=10, resync_interval_s=300, metrics_port=0)
    sink = KubeSink(client)  # type: ignore[arg-type]
    pub = NodePublisher("n1", StaticBackend(load("gb200-nvl72-tray")), sink, settings, metrics,
                        clock=clock.wall, monotonic=clock.mono)
    return pub, client, metrics, clock


def sample(metrics: AgentMetrics, name: str, kind: str) -> float:
    """A counter's value by its exposed name; a series never incremented reads 0."""
    return metrics.registry.get_sample_value(name, {"kind": kind}) or 0.0


def exposed_errors(metrics: AgentMetrics) -> dict[str, float]:
    """The error counter's series as ``/metrics`` exposes them: kind → value."""
    found: dict[str, float] = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(ERRORS + "{"):
            labels, value = line[len(ERRORS):].rsplit(" ", 1)
            assert labels.startswith('{kind="') and labels.endswith('"}'), line  # `kind` is the only label
            found[labels[len('{kind="'):-2]] = float(value)
    return found


async def test_successful_writes_count_no_error(load_dump_fixture: Load) -> None:
    pub, client, metrics, clock = make_publisher(load_dump_fixture)
    for _ in range(3):
        result = await pub.poll_once()
        assert result.errors == ()
        clock.t += 301  # the resync timer: every poll writes both again
    assert sample(metrics, WRITES, "status") == 3 and sample(metrics, WRITES, "labels") == 3
    assert client.calls.count("patch_status") == 3 and client.calls.count("patch_labels") == 3
    assert sample(metrics, ERRORS, "status") == 0 and sample(metrics, ERRORS, "labels") == 0
    assert all(v == 0 for v in exposed_errors(metrics).values())


@pytest.mark.parametrize(
    ("op", "error", "kind"),
    [
        ("patch_status", lambda: api_error(500), "status"),
        ("patch_status", lambda: api_error(409), "status"),
        ("patch_status", connect_error, "status"),
        ("get_node", lambda: api_error(503, "GET"), "status"),  # the create that precedes the first patch
        ("create", lambda: api_error(500, "POST"), "status"),
        ("patch_labels", lambda: api_error(500), "labels"),
        ("patch_labels", lambda: api_error(422), "labels"),
        ("patch_labels", connect_error, "labels"),
    ],
)
async def test_each_failed_write_counts_one_error_of_its_kind(
    load_dump_fixture: Load, op: str, error: Callable[[], Exception], kind: str
) -> None:
    pub, client, metrics, clock = make_publisher(load_dump_fixture)
    other = "labels" if kind == "status" else "status"
    failures = 3
    client.fail[op] = [error() for _ in range(failures)]
    for n in range(1, failures + 1):
        result = await pub.poll_once()
        assert len(result.errors) == 1 and result.errors[0].startswith(f"{kind}: ")
        assert sample(metrics, ERRORS, kind) == n
        assert exposed_errors(metrics)[kind] == n
        assert sample(metrics, ERRORS, other) == 0
        clock.t += 10
    # The API server answers again: the retried write succeeds and counts no error.
    result = await pub.poll_once()
    assert result.errors == ()
    assert sample(metrics, ERRORS, kind) == failures and sample(metrics, ERRORS, other) == 0
    assert sample(metrics, WRITES, kind) == 1  # only the write that got through


async def test_status_and_labels_failing_in_one_poll_count_one_each(load_dump_fixture: Load) -> None:
    pub, client, metrics, _ = make_publisher(load_dump_fixture)
    client.fail = {"patch_status": [api_error(500)], "patch_labels": [api_error(500)]}
    result = await pub.poll_once()
    assert len(result.errors) == 2
    assert exposed_errors(metrics) == {"status": 1.0, "labels": 1.0}


async def test_a_deleted_gpunode_whose_recreate_patch_fails_counts_one_error(load_dump_fixture: Load) -> None:
    """A 404 on the status patch is not a failure by itself (the GPUNode is recreated and patched
    again); that second patch failing too is one failed write, not two."""
    pub, client, metrics, _ = make_publisher(load_dump_fixture)
    client.fail["patch_status"] = [api_error(404), api_error(500)]
    result = await pub.poll_once()
    assert [e.split(":")[0] for e in result.errors] == ["status"]
    assert client.calls.count("patch_status") == 2
    assert sample(metrics, ERRORS, "status") == 1

    pub, client, metrics, _ = make_publisher(load_dump_fixture)
    client.fail["patch_status"] = [api_error(404)]
    assert (await pub.poll_once()).errors == ()
    assert sample(metrics, ERRORS, "status") == 0 and sample(metrics, WRITES, "status") == 1
