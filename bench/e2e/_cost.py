"""What the kubegang half costs, against plain kube-scheduler in the same run (issue 14's goals).

On a machine this small every process shares two CPUs, so throughput follows CPU per pod: the
ratio of pods bound per second can only reach 0.9 if the kubegang path spends about as much CPU
per pod as the plain one. This module turns a run's raw figures into that account:

- CPU seconds per started job and per bound pod, per process and in all, for each half;
- the standby's CPU against the leader's (which replica led is read from the Lease);
- the operator's CPU per started job against the API server's;
- writes per pod, also without node-heartbeat Leases (kwok renews one per node on a timer, so their
  count follows the half's wall time, not its work);
- the API server's request seconds by verb and resource (its own histogram: the closest it says to
  where its CPU goes) and, when the run was profiled, where each kubegang process's CPU went.

Goals (issue 14), each met / missed / not measured: pods bound/s ratio >= 0.9 overall and steady;
standby CPU <= 5% of the leader's; writes per pod <= plain + 1; operator CPU per started job <= half
the API server's.
"""

from __future__ import annotations

from typing import Any

from bench.e2e._dig import dig

RATIO_GOAL = 0.9
STANDBY_SHARE_GOAL = 0.05
EXTRA_WRITES_PER_POD_GOAL = 1.0
OPERATOR_OVER_APISERVER_GOAL = 0.5
HEARTBEATS = "PUT leases"
"""Node and component Lease renewals: on a timer, so per pod they follow the window's length."""
KUBEGANG = ("kubegang-operator-0", "kubegang-operator-1", "kubegang-extender", "kubegang-agent")


def _div(a: Any, b: Any, digits: int = 3) -> float | None:
    return round(a / b, digits) if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def _verdict(ok: bool | None, complete: bool = True) -> str:
    if ok is None:
        return "not measured"
    return ("met" if ok else "missed") + ("" if complete else " (run incomplete)")


def _cpu(half: dict[str, Any]) -> dict[str, float]:
    """CPU seconds per process of a half (process supervisors left out: they only wait)."""
    return {n: p["cpu_seconds"] for n, p in (half.get("processes") or {}).items() if not n.endswith(".supervisor")}


def operators(kg: dict[str, Any]) -> tuple[str | None, str | None]:
    """(leader, standby) process names; the Lease holder ``local-operator-<i>`` runs as kubegang-operator-<i>."""
    names = sorted(n for n in _cpu(kg) if n.startswith("kubegang-operator-"))
    holder = kg.get("leader")
    leader = f"kubegang-operator-{holder.rsplit('-', 1)[-1]}" if isinstance(holder, str) else None
    if leader not in names:
        return None, None
    standby = next((n for n in names if n != leader), None)
    return leader, standby


def summary(out: dict[str, Any]) -> dict[str, Any]:
    kg, plain = out.get("kubegang") or {}, out.get("plain") or {}
    complete = bool(kg.get("complete")) and bool(plain.get("complete"))
    ratio = _div(dig(kg, "pods_bound", "overall_per_s"), dig(plain, "pods_bound", "overall_per_s"))
    steady = _div(dig(kg, "pods_bound", "steady_per_s"), dig(plain, "pods_bound", "steady_per_s"))
    cpu = _cpu(kg)
    leader, standby = operators(kg)
    standby_share = _div(cpu.get(standby or ""), cpu.get(leader or ""))
    jobs = dig(kg, "jobs_started", "count")
    operator_ms = _div(1000 * sum(v for n, v in cpu.items() if n.startswith("kubegang-operator-")), jobs, 2)
    apiserver_ms = _div(1000 * cpu["kube-apiserver"], jobs, 2) if "kube-apiserver" in cpu else None
    writes = {h: dig(half, "apiserver", "writes_per_pod") for h, half in (("kubegang", kg), ("plain", plain))}
    extra = (round(writes["kubegang"] - writes["plain"], 2)
             if writes["kubegang"] is not None and writes["plain"] is not None else None)
    return {
        "pods_bound_ratio": ratio, "pods_bound_steady_ratio": steady,
        "goal_ratio_0_9": _verdict(None if ratio is None or steady is None else min(ratio, steady) >= RATIO_GOAL,
                                   complete),
        "leader": leader, "standby": standby, "standby_over_leader_cpu": standby_share,
        "goal_standby_5pct": _verdict(None if standby_share is None else standby_share <= STANDBY_SHARE_GOAL),
        "operator_cpu_ms_per_started_job": operator_ms, "apiserver_cpu_ms_per_started_job": apiserver_ms,
        "goal_operator_half_of_apiserver": _verdict(
            None if operator_ms is None or apiserver_ms is None
            else operator_ms <= OPERATOR_OVER_APISERVER_GOAL * apiserver_ms),
        "writes_per_pod": writes, "extra_writes_per_pod": extra,
        "writes_per_pod_without_heartbeats": {h: without_heartbeats(half) for h, half in
                                              (("kubegang", kg), ("plain", plain))},
        "goal_writes_plain_plus_1": _verdict(None if extra is None else extra <= EXTRA_WRITES_PER_POD_GOAL),
    }


def without_heartbeats(half: dict[str, Any]) -> float | None:
    api = half.get("apiserver") or {}
    pods = dig(half, "pods_bound", "expected")
    total = api.get("writes_total")
    if total is None or not pods:
        return None
    heartbeats = float((api.get("writes") or {}).get(HEARTBEATS, 0))
    return round((float(total) - heartbeats) / float(pods), 2)


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:,.2f}" if isinstance(v, float) else str(v)


def cpu_table(out: dict[str, Any]) -> str:
    """CPU seconds per process, per started job and per bound pod, in each half that ran."""
    halves = [(h, out.get(h) or {}) for h in ("kubegang", "plain") if out.get(h)]
    lines = ["| process | " + " | ".join(f"{h}: CPU s | ms / job | ms / pod" for h, _ in halves) + " |",
             "|---|" + "---:|---:|---:|" * len(halves)]
    names = sorted({n for _, half in halves for n in _cpu(half)},
                   key=lambda n: -max(_cpu(half).get(n, 0.0) for _, half in halves))
    per = [(half, dig(half, "jobs_started", "count") or dig(half, "pods_bound", "count"),
            dig(half, "pods_bound", "count")) for _, half in halves]
    for name in [*names, "all"]:
        cells = []
        for half, jobs, pods in per:
            cpu = _cpu(half)
            v = round(sum(cpu.values()), 2) if name == "all" else cpu.get(name)
            cells.append(f"{_fmt(v)} | {_fmt(_div(1000 * v, jobs, 1) if v is not None else None)} | "
                         f"{_fmt(_div(1000 * v, pods, 1) if v is not None else None)}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def request_seconds_table(out: dict[str, Any], top: int = 10) -> str:
    halves = [(h, dig(out, h, "apiserver", "request_seconds") or {}) for h in ("kubegang", "plain")]
    keys = sorted(set().union(*(s for _, s in halves)), key=lambda k: -sum(s.get(k, 0.0) for _, s in halves))[:top]
    lines = ["| request | kubegang half: s | plain half: s |", "|---|---:|---:|"]
    lines += [f"| {k} | " + " | ".join(_fmt(s.get(k)) for _, s in halves) + " |" for k in keys]
    lines.append("| all (non-watch) | " + " | ".join(_fmt(dig(out, h, "apiserver", "request_seconds_total"))
                                                   for h, _ in halves) + " |")
    return "\n".join(lines)


def profile_lines(out: dict[str, Any], top: int = 6) -> list[str]:
    profiles = dig(out, "kubegang", "profiles") or {}
    lines = []
    for name in KUBEGANG:
        p = profiles.get(name)
        if not p or not p.get("samples"):
            continue
        tasks = "; ".join(f"{share:.0%} {task}" for task, _, share in p["by_task"][:top])
        leaves = "; ".join(f"{share:.0%} {leaf}" for leaf, _, share in p["by_leaf"][:4])
        lines.append(f"- **{name}** ({p['samples']} samples at {p['rate_hz']} Hz, `{p['file']}`): by task: "
                     f"{tasks}. Hottest leaves: {leaves}.")
    return lines


def idle_line(out: dict[str, Any]) -> str | None:
    idle = out.get("kubegang_idle") or {}
    procs = idle.get("processes") or {}
    if not procs:
        return None
    secs = idle["seconds"]
    parts = [f"{n} {1000 * p['cpu_seconds'] / secs:.0f} ms/s" for n, p in procs.items()
             if not n.endswith(".supervisor")]
    own = sum(p["cpu_seconds"] for n, p in procs.items() if n in KUBEGANG) / secs
    rss = sum(p["rss_mib"] for n, p in procs.items() if n in KUBEGANG)
    return (f"At rest ({secs:.0f} s with kubegang up and nothing submitted): {', '.join(parts)}; kubegang's own "
            f"processes {own:.3f} CPUs and {rss:,.0f} MiB resident.")


def section(out: dict[str, Any]) -> list[str]:
    s = out.get("summary", {}).get("cost") or summary(out)
    kg = out.get("kubegang") or {}
    if not kg:
        return []
    wph = s["writes_per_pod_without_heartbeats"]
    lines = [
        "## Cost per job and per pod (issue 14)",
        "",
        "On two shared CPUs throughput follows CPU per pod: the kubegang path can bind pods at 0.9x plain "
        "kube-scheduler's rate only if, all processes together, it spends about as much CPU per pod. "
        "Where that CPU goes and what was changed for it: [benchmarks-e2e-analysis.md](benchmarks-e2e-analysis.md).",
        "",
        cpu_table(out),
        "",
        f"- **Pods bound/s at least {RATIO_GOAL} x plain** (overall and steady): {s['goal_ratio_0_9']} — "
        f"{_fmt(s['pods_bound_ratio'])} overall, {_fmt(s['pods_bound_steady_ratio'])} steady.",
        f"- **Standby CPU at most {STANDBY_SHARE_GOAL:.0%} of the leader's:** {s['goal_standby_5pct']} — "
        f"{s['standby']} (standby) {_fmt(s['standby_over_leader_cpu'])} x {s['leader']} (leader).",
        f"- **Operator CPU per started job at most half the API server's:** {s['goal_operator_half_of_apiserver']}"
        f" — operators {_fmt(s['operator_cpu_ms_per_started_job'])} ms, API server "
        f"{_fmt(s['apiserver_cpu_ms_per_started_job'])} ms per started job.",
        f"- **Writes per pod at most plain + 1:** {s['goal_writes_plain_plus_1']} — kubegang "
        f"{_fmt(s['writes_per_pod']['kubegang'])}, plain {_fmt(s['writes_per_pod']['plain'])} "
        f"(+{_fmt(s['extra_writes_per_pod'])}); without `{HEARTBEATS}` (timer-driven, so per pod they grow "
        f"with a half's wall time): kubegang {_fmt(wph['kubegang'])}, plain {_fmt(wph['plain'])}.",
        "",
        "The API server's own request seconds by verb and resource (`apiserver_request_duration_seconds`, "
        "watches left out; wall time inside the server, so waiting for etcd or for a CPU counts too):",
        "",
        request_seconds_table(out),
        "",
    ]
    idle = idle_line(out)
    if idle:
        lines += [idle, ""]
    prof = profile_lines(out)
    if prof:
        lines += ["Where kubegang's processes spent their CPU during the burst (py-spy, `--profile`; the "
                  "collapsed stacks open in speedscope.app as flame graphs):", "", *prof, ""]
    return lines
