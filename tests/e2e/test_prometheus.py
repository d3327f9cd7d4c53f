"""A real Prometheus (Debian's package) scrapes the operators, extender and agent of the e2e session's
kubegang stack (``hack/cluster kubegang up``: the processes started with the flags their --help shows,
as local processes against the local control plane), evaluates kubegang's alert rules, and every
query of the Grafana dashboard returns data.

The test scrapes the session's stack rather than starting a second one: two stacks on one cluster
race for the same GPUJobs (the session's operators watch every namespace), and the admission metrics
would then land in whichever operator won. A GPUQueue and a GPUJob make the leader admit a gang;
HTTPS filter requests (one malformed on purpose) exercise the extender's verbs. Queries of metrics
that only exist after a rare event (preemption, gang restart, watch restart, XID, failed API write)
cannot have data on a healthy idle cluster: for those the test checks instead that a process exposes
the metric family (its # TYPE line), so a renamed metric still fails here.

The stack runs with metrics auth on for this test, as the chart runs it by default
(``hack/cluster kubegang up --metrics-auth on``, then back to the default): every /metrics is HTTPS
and refuses a scrape without a token (401) and with the token of an account RBAC does not allow
(403), the extender's /debug/snapshot refuses a client certificate without an allowed token, and
Prometheus scrapes every target with the scraper's ServiceAccount token and the stack's CA, exactly
as the chart's ServiceMonitor configures it (``bearerTokenFile`` + ``tlsConfig.ca``).
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kubegang.testing import free_port
from kubegang.tls import client_ssl_context

Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)
Kubegang = Any  # the `kubegang` fixture's object: the session's stack (tests/e2e/conftest.py)
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubegang"
DASHBOARD = CHART / "dashboards" / "kubegang.json"
RULES = CHART / "rules" / "kubegang-alerts.yaml"
RATE_WINDOW = "2m"
# Dashboard queries whose metrics appear only after an event a healthy, idle cluster does not produce.
EVENT_ONLY = {
    "kubegang_jobs_preempted_total": "a preemption",
    "kubegang_gang_restarts_total": "a whole-gang restart",
    "kubegang_extender_watch_restarts_total": "a watch stream restart",
    "kubegang_gpu_xid_events_total": "an XID from the driver",
    "kubegang_agent_api_write_errors_total": "a failed API write",
}


def _prometheus() -> str:
    proc = subprocess.run([str(REPO / "hack" / "prometheus.sh")], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"hack/prometheus.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}", pytrace=False)
    found = [p for p in proc.stdout.split() if p.endswith("/prometheus")]
    if not found:
        pytest.fail(f"hack/prometheus.sh did not name prometheus: {proc.stdout!r}", pytrace=False)
    return found[0]


class Processes:
    """Started subprocesses, their logs, and a clean stop."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.logs)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{tail}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop()


class Scraper:
    """Reads the stack's /metrics as the chart's ServiceMonitor does: HTTPS trusting the stack's CA, with
    the scraper's ServiceAccount token."""

    def __init__(self, metrics: dict[str, Any]) -> None:
        assert metrics["auth"] == "on", metrics
        self.ca = Path(metrics["ca"])
        self.token_file = Path(metrics["token_file"])
        self.headers = {"Authorization": f"Bearer {self.token_file.read_text().strip()}"}

    def get(self, url: str, token: str | None = "scraper", timeout: float = 10) -> httpx.Response:
        headers = self.headers if token == "scraper" else {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(url, headers=headers, verify=ssl.create_default_context(cafile=str(self.ca)), timeout=timeout)


def _wait_http(url: str, alive: Callable[[], None], timeout: float = 60,
               get: Callable[[str], httpx.Response] | None = None) -> None:
    get = get or (lambda u: httpx.get(u, timeout=2))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        try:
            if get(url).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer 200 within {timeout:.0f}s")


def _queue_and_job(namespace: str) -> list[dict[str, Any]]:
    queue = f"{namespace}-q"
    return [
        {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": queue},
         "spec": {"namespaces": [namespace], "resources": [{"flavor": "nvidia-h100", "nominal": 64}]}},
        {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
         "metadata": {"name": "scrape-me", "namespace": namespace},
         "spec": {"replicas": 2, "queue": queue, "template": {"spec": {"containers": [{
             "name": "main", "image": "registry.invalid/train:1",
             "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}},
    ]


def _filter_requests(port: int, tls_dir: Path, node: str) -> None:
    pod = {"metadata": {"name": "probe", "namespace": "default", "uid": "probe-uid"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    # An SSLContext, not verify=<path> + cert=: with a path for verify, httpx 0.28 returns before it
    # loads `cert` (httpx/_config.py), so no client certificate is sent and the mTLS server drops
    # the connection after the TLS 1.3 handshake.
    ctx = client_ssl_context(tls_dir / "ca.crt", tls_dir / "client.crt", tls_dir / "client.key")
    with httpx.Client(verify=ctx, base_url=f"https://127.0.0.1:{port}", timeout=10) as client:
        for _ in range(5):
            assert client.post("/filter", json={"Pod": pod, "NodeNames": [node]}).status_code == 200
            assert client.post("/prioritize", json={"Pod": pod, "NodeNames": [node]}).status_code == 200
        bad = client.post("/filter", content=b"{not json", headers={"Content-Type": "application/json"})
        assert bad.status_code == 400


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.fixture
def authenticated_stack(kubegang: Kubegang) -> Iterator[Kubegang]:
    """The session's stack with metrics auth on (the chart's default) for one test, then as it was."""
    kubegang.restart("--metrics-auth", "on")
    try:
        yield kubegang
    finally:
        kubegang.restart()


def _assert_unauthenticated_scrapes_are_refused(cluster: Cluster, kubegang: Kubegang, scraper: Scraper,
                                                namespace: str, addresses: list[str]) -> None:
    cluster.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    nobody = cluster.kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()
    for address in addresses:
        url = f"https://{address}/metrics"
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served at all
            httpx.get(f"http://{address}/metrics", timeout=5)
        anonymous = scraper.get(url, token=None)
        assert anonymous.status_code == 401, (address, anonymous.text)
        assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
        assert "kubegang_" not in anonymous.text
        assert scraper.get(url, token="not-a-token").status_code == 401
        forbidden = scraper.get(url, token=nobody)
        assert forbidden.status_code == 403, (address, forbidden.text)
        assert f"system:serviceaccount:{namespace}:nobody" in forbidden.text
        assert "kubegang_" not in forbidden.text
    stack = kubegang.ports
    # kubelet's probes carry no token: health and readiness stay open (over HTTPS).
    assert scraper.get(f"https://127.0.0.1:{stack['extender_metrics']}/readyz", token=None).status_code == 200
    health = scraper.get(f"https://127.0.0.1:{stack['agent_metrics']}/healthz", token=None)
    assert health.text in ("ok\n", "stalled\n"), health.text  # the health handler answered (stalled: new shape)
    # /debug/snapshot: the client certificate is no longer enough, and /metrics rights do not open it.
    ctx = client_ssl_context(kubegang.tls_dir / "ca.crt", kubegang.tls_dir / "client.crt",
                             kubegang.tls_dir / "client.key")
    snapshot = f"https://127.0.0.1:{stack['extender_https']}/debug/snapshot"
    assert httpx.get(snapshot, verify=ctx, timeout=10).status_code == 401
    assert httpx.get(snapshot, verify=ctx, timeout=10, headers=scraper.headers).status_code == 403
    cluster.kubectl("create", "clusterrole", f"{namespace}-snapshot", "--verb=get",
                    "--non-resource-url=/debug/snapshot")
    try:
        cluster.kubectl("create", "clusterrolebinding", f"{namespace}-snapshot",
                        f"--clusterrole={namespace}-snapshot", f"--serviceaccount={namespace}:nobody")
        deadline = time.monotonic() + 30  # the refusal above is cached for a few seconds
        while (answer := httpx.get(snapshot, verify=ctx, timeout=10,
                                   headers={"Authorization": f"Bearer {nobody}"})).status_code != 200:
            assert answer.status_code == 403 and time.monotonic() < deadline, answer.text
            time.sleep(1)
        assert "nodes" in answer.json()
    finally:
        cluster.kubectl("delete", "clusterrolebinding", f"{namespace}-snapshot", "--ignore-not-found", check=False)
        cluster.kubectl("delete", "clusterrole", f"{namespace}-snapshot", "--ignore-not-found", check=False)


def test_prometheus_scrapes_and_every_dashboard_query_has_data(
        cluster: Cluster, authenticated_stack: Kubegang, namespace: str, processes: Processes, tmp_path: Path) -> None:
    kubegang = authenticated_stack
    cluster.use_shape("superpod-h100")
    prometheus = _prometheus()
    node = cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").stdout.split()[0].removeprefix("node/")
    stack = kubegang.ports
    scraper = Scraper(kubegang.metrics)
    targets = {
        "operator": [f"127.0.0.1:{port}" for port in stack["operator_metrics"]],
        "extender": [f"127.0.0.1:{stack['extender_metrics']}"],
        "agent": [f"127.0.0.1:{stack['agent_metrics']}"],
    }
    alive = _stack_alive(kubegang)
    addresses = [a for addresses in targets.values() for a in addresses]
    for address in addresses:
        _wait_http(f"https://{address}/metrics", alive, get=scraper.get)
    _assert_unauthenticated_scrapes_are_refused(cluster, kubegang, scraper, namespace, addresses)

    prom_port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        # What the chart's ServiceMonitor renders to: HTTPS verified against the CA, a token file.
        "scrape_configs": [{"job_name": f"kubegang-{c}", "scheme": "https",
                            "authorization": {"type": "Bearer", "credentials_file": str(scraper.token_file)},
                            "tls_config": {"ca_file": str(scraper.ca)},
                            "static_configs": [{"targets": addresses}]}
                           for c, addresses in targets.items()],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    processes.start("prometheus", [
        prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prom_port}", "--web.enable-lifecycle"], {**os.environ})
    prom = f"http://127.0.0.1:{prom_port}"

    def all_alive() -> None:
        processes.check_alive()
        alive()

    _wait_http(f"{prom}/-/ready", all_alive)

    cluster.apply(_queue_and_job(namespace))
    try:
        _filter_requests(stack["extender_https"], kubegang.tls_dir, node)
        _assert_dashboard_has_data(prom, all_alive, addresses, lambda: _job_story(cluster, namespace, kubegang),
                                   scraper)
        _assert_rules_evaluate(prom)
        scraped = httpx.get(f"{prom}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        assert sorted((t["labels"]["job"], t["health"]) for t in scraped) == sorted(
            (f"kubegang-{c}", "up") for c, addresses in targets.items() for _ in addresses)
    finally:
        cluster.kubectl("delete", "gpujob", "scrape-me", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", f"{namespace}-q", "--wait=false", check=False)
        shutil.copytree(tmp_path, REPO / ".pytest_cache" / "prometheus-e2e-logs", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("tsdb"))


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"].replace("$__rate_interval", RATE_WINDOW))
            for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]


def _job_story(cluster: Cluster, namespace: str, kubegang: Kubegang) -> str:
    """What the GPUJob and the operators say, for a failure message (the admission metrics need the
    job admitted)."""
    job = cluster.kubectl("get", "gpujob", "scrape-me", "-n", namespace, "-o", "json", check=False)
    status = json.loads(job.stdout).get("status") if job.returncode == 0 else job.stderr
    assert cluster.cluster_dir is not None
    logs = "".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-1500:]}\n"
                   for log in sorted((cluster.cluster_dir / "logs").glob("kubegang-operator-*.log")))
    return f"GPUJob status: {json.dumps(status, indent=1)}\n{logs}"


def _stack_alive(kubegang: Kubegang) -> Callable[[], None]:
    """A check that the session stack's processes still run (their pids, from hack/cluster)."""
    names = ["kubegang-extender", "kubegang-agent",
             *(f"kubegang-operator-{i}" for i in range(len(kubegang.ports["operator_metrics"])))]

    def check() -> None:
        for name in names:
            pid = kubegang.pid(name)
            try:
                if pid is None:
                    raise ProcessLookupError
                os.kill(pid, 0)
            except ProcessLookupError:
                raise AssertionError(f"{name} (pid {pid}) is not running") from None

    return check


def _assert_dashboard_has_data(
    prom: str, alive: Callable[[], None], addresses: list[str], story: Callable[[], str], scraper: Scraper
) -> None:
    exposition = "".join(scraper.get(f"https://{address}/metrics").text for address in addresses)
    pending = {}
    for title, expr in _panel_queries():
        event = [m for m in EVENT_ONLY if m in expr]
        if event:
            for metric in event:
                assert f"# TYPE {metric} counter" in exposition, f"{title}: {metric} is not exposed by any process"
            continue
        pending[(title, expr)] = True
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        alive()
        for key in list(pending):
            if _query(prom, key[1]):
                del pending[key]
        time.sleep(2)
    assert not pending, (
        "dashboard queries without data:\n" + "\n".join(f"  {t}: {e}" for t, e in pending) + "\n" + story()
    )


def _assert_rules_evaluate(prom: str) -> None:
    groups = httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
    expected = {g["name"] for g in yaml.safe_load(RULES.read_text())["groups"]}
    assert {g["name"] for g in groups} == expected
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rules = [r for g in httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
                 for r in g["rules"]]
        if all(r.get("lastEvaluation", "").startswith("20") for r in rules):
            break
        time.sleep(1)
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, f"alert rules that do not evaluate: {bad}"
