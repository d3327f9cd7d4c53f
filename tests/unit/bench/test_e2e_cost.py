"""bench/e2e's cost account (issue 14): the goals read the right processes and counts, and a py-spy
profile is summarized by the task the event loop was running."""

from __future__ import annotations

from typing import Any

from bench.e2e import _cost as cost
from bench.e2e import _profile as profile


def half(cpu: dict[str, float], jobs: int, pods: int, writes: dict[str, int], rate: float,
         steady: float) -> dict[str, Any]:
    return {
        "complete": True,
        "processes": {n: {"cpu_seconds": v} for n, v in cpu.items()},
        "jobs_started": {"count": jobs}, "pods_bound": {"count": pods, "expected": pods,
                                                        "overall_per_s": rate, "steady_per_s": steady},
        "apiserver": {"writes": writes, "writes_total": sum(writes.values()),
                      "writes_per_pod": round(sum(writes.values()) / pods, 2)},
    }


def run() -> dict[str, Any]:
    kg = half({"kubegang-operator-0": 10.0, "kubegang-operator-1": 0.2, "kube-apiserver": 30.0,
               "kube-apiserver.supervisor": 5.0}, jobs=100, pods=200,
              writes={"POST pods": 200, "PUT leases": 300, "PATCH gpujobs/status": 200}, rate=90.0, steady=95.0)
    kg["leader"] = "local-operator-0"
    plain = half({"kube-apiserver": 20.0}, jobs=0, pods=200, writes={"APPLY pods": 200, "PUT leases": 100},
                 rate=100.0, steady=100.0)
    return {"kubegang": kg, "plain": plain}


def test_the_leader_is_the_lease_holder_and_the_standby_the_other_replica() -> None:
    s = cost.summary(run())
    assert (s["leader"], s["standby"]) == ("kubegang-operator-0", "kubegang-operator-1")
    assert s["standby_over_leader_cpu"] == 0.02 and s["goal_standby_5pct"] == "met"


def test_the_ratio_goal_needs_both_overall_and_steady() -> None:
    s = cost.summary(run())
    assert (s["pods_bound_ratio"], s["pods_bound_steady_ratio"]) == (0.9, 0.95)
    assert s["goal_ratio_0_9"] == "met"
    slow = run()
    slow["kubegang"]["pods_bound"]["steady_per_s"] = 80.0
    assert cost.summary(slow)["goal_ratio_0_9"] == "missed"


def test_operator_cpu_per_job_is_set_against_the_api_servers_and_supervisors_are_left_out() -> None:
    s = cost.summary(run())
    assert s["operator_cpu_ms_per_started_job"] == 102.0 and s["apiserver_cpu_ms_per_started_job"] == 300.0
    assert s["goal_operator_half_of_apiserver"] == "met"


def test_writes_per_pod_against_plain_plus_one_and_without_heartbeats() -> None:
    s = cost.summary(run())
    assert s["writes_per_pod"] == {"kubegang": 3.5, "plain": 1.5} and s["extra_writes_per_pod"] == 2.0
    assert s["goal_writes_plain_plus_1"] == "missed"
    assert s["writes_per_pod_without_heartbeats"] == {"kubegang": 2.0, "plain": 1.0}


def test_an_unknown_lease_holder_measures_no_standby_share() -> None:
    out = run()
    out["kubegang"]["leader"] = None
    assert cost.summary(out)["goal_standby_5pct"] == "not measured"


def test_a_profile_is_summarized_by_the_task_the_loop_ran() -> None:
    repo = profile.REPO
    loop = "thread (1): MainThread;run (asyncio/runners.py:1);Handle._run (asyncio/events.py:78)"
    collapsed = "\n".join([
        f"{loop};KubeApi.create ({repo}operator/_kube.py:120);send (/x/.venv/lib/httpx2/_client.py:9) 6",
        f"{loop};worker (/x/.venv/lib/site-packages/kopf/_core/reactor/queueing.py:261) 3",
        "thread (1): MainThread;select (/usr/lib/python3.11/selectors.py:451) 1",
    ])
    s = profile.summarize(collapsed)
    assert s["samples"] == 10
    assert s["by_task"][0] == ["operator/_kube.py:KubeApi.create", 6, 0.6]
    assert s["by_task"][1] == ["reactor/queueing.py:worker", 3, 0.3]
    assert s["by_task"][2][0] == "(outside a task) python3.11/selectors.py:select"
    assert s["kubegang_inclusive"] == [["operator/_kube.py:KubeApi.create", 6, 0.6]]


def test_the_scale_page_states_kubegangs_share_of_a_cluster_of_128_core_nodes() -> None:
    from bench.e2e import scale

    out = run()
    out["cluster"] = {"gpu_nodes": 1024}
    out["kubegang"]["wall_s"] = 100.0
    for p in out["kubegang"]["processes"].values():
        p["peak_rss_mib"] = 100.0
    out["kubegang_idle"] = {"seconds": 10.0, "processes": {"kubegang-operator-0": {"cpu_seconds": 0.5},
                                                           "kube-apiserver": {"cpu_seconds": 3.0}}}
    share = scale.own_share(out)
    assert share["cluster_cores"] == 1024 * 128
    assert share["idle_cpus"] == 0.05 and share["burst_cpus"] == 10.2 / 100.0
    assert share["peak_rss_mib"] == 200.0           # the two operator replicas; the API server is not kubegang's
    assert "| 1,024 | 0.050 | 3.8e-05% |" in scale.markdown([out])
    assert scale.jobs_for(4096, 2000 / 1024, 2000) == 2000 and scale.jobs_for(256, 2000 / 1024, 2000) == 500
