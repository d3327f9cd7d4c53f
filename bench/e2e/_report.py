"""Turns a run's raw results into the comparison against the goals, a table and docs/benchmarks-e2e.md.

Three halves when all ran: kubegang (GPUJobs), the real Kueue (batch Jobs, bench/e2e/_kueue.py) and
plain kube-scheduler (pods); the gang figures of each come from bench/e2e/_gangs.py.

Goals (issue 8): at least 50 GPUJob starts per second end to end; the extender costs at most 25% of
plain kube-scheduler pod throughput, i.e. kubegang's pods bound per second are at least 0.75 x the
baseline's. Each is reported as met, missed, or not measured; never assumed.
"""

from __future__ import annotations

from typing import Any

from bench.e2e import _cost as cost
from bench.e2e._dig import dig

JOB_STARTS_GOAL = 50.0
THROUGHPUT_RATIO_GOAL = 0.75
COMPONENTS = ("kubegang-operator-0", "kubegang-operator-1", "kubegang-extender", "kubegang-agent", "kueue",
              "kube-scheduler", "kube-apiserver", "etcd", "kwok", "kube-controller-manager")
HALVES = (("kubegang", "kubegang (GPUJobs)"), ("kueue", "Kueue (batch Jobs)"), ("plain", "plain kube-scheduler (pods)"))
HIGHER_IS_BETTER = frozenset({"jobs admitted / s", "jobs started / s", "pods bound / s (all)",
                              "pods bound / s (steady, p10–p90)", "gangs in one leaf", "gangs in one NVLink domain",
                              "GPU allocation while jobs wait"})
LOWER_IS_BETTER = frozenset({"time until all Running (s)", "partial gangs", "GPUs held by gangs not yet whole",
                             "CPU seconds, all processes", "CPU seconds, the system's own processes",
                             "peak RSS, the system's own processes (MiB)"})
"""The head-to-head figures (kubegang against Kueue) and which way is better."""
OWN_PROCESSES = ("kubegang-", "kueue")
"""Process-name prefixes of each system's own processes (the control plane's are shared by all halves)."""
WHY_KUEUE_AHEAD = {
    "CPU seconds, the system's own processes":
        "Kueue's one Go process works once per job; kubegang's extender also answers kube-scheduler's "
        "filter and prioritize for every pod, and its processes are Python.",
    "peak RSS, the system's own processes (MiB)":
        "Kueue is one Go process; kubegang runs two operator replicas (a leader and a warm standby), the "
        "extender and the agent, each a Python process with its own copy of the objects it watches.",
}
"""Structural reasons for figures Kueue can be ahead on; a figure ahead without one says so."""


def _ratio(a: Any, b: Any) -> float | None:
    return round(a / b, 3) if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def _verdict(value: float | None, goal: float, complete: bool) -> str:
    if value is None:
        return "not measured"
    met = "met" if value >= goal else "missed"
    return met if complete else f"{met} (run incomplete)"


def summary(out: dict[str, Any]) -> dict[str, Any]:
    kg, plain = out.get("kubegang") or {}, out.get("plain") or {}
    starts = dig(kg, "jobs_started", "overall_per_s")
    kg_complete, plain_complete = bool(kg.get("complete")), bool(plain.get("complete"))
    ratio_overall = _ratio(dig(kg, "pods_bound", "overall_per_s"), dig(plain, "pods_bound", "overall_per_s"))
    ratio_steady = _ratio(dig(kg, "pods_bound", "steady_per_s"), dig(plain, "pods_bound", "steady_per_s"))
    ms_per_pod = dig(kg, "extender", "scheduler_verbs_ms_per_pod")
    plain_rate = dig(plain, "pods_bound", "overall_per_s")
    # Serial model: kube-scheduler waits for the extender on each pod, so P pods/s becomes
    # 1 / (1/P + E); the share of throughput lost is 1 - 1 / (1 + E x P).
    serial_cost = (round(1 - 1 / (1 + ms_per_pod / 1000 * plain_rate), 4)
                   if isinstance(ms_per_pod, int | float) and isinstance(plain_rate, int | float) else None)
    return {
        "extender_scheduler_verbs_ms_per_pod": ms_per_pod,
        "extender_cost_serial_model": serial_cost,
        "gpujob_starts_per_s": starts,
        "gpujob_starts_steady_per_s": dig(kg, "jobs_started", "steady_per_s"),
        "kubegang_pods_bound_per_s": dig(kg, "pods_bound", "overall_per_s"),
        "plain_pods_bound_per_s": dig(plain, "pods_bound", "overall_per_s"),
        "pods_bound_ratio_kubegang_over_plain": ratio_overall,
        "pods_bound_steady_ratio_kubegang_over_plain": ratio_steady,
        "time_until_all_running_s": {"kubegang": kg.get("time_until_all_running_s"),
                                     "plain": plain.get("time_until_all_running_s")},
        "time_until_all_running_ratio_kubegang_over_plain": _ratio(kg.get("time_until_all_running_s"),
                                                                   plain.get("time_until_all_running_s")),
        "goal_50_job_starts_per_s": _verdict(starts, JOB_STARTS_GOAL, kg_complete),
        "goal_extender_costs_at_most_25pct": _verdict(ratio_overall, THROUGHPUT_RATIO_GOAL,
                                                      kg_complete and plain_complete),
        "cost": cost.summary(out),
        "correct": {
            "kubegang_overcommitted_nodes": len(dig(kg, "audit", "overcommitted_nodes") or {}) if kg else None,
            "kubegang_pods_off_plan": dig(kg, "audit", "pods_off_plan_count"),
            "plain_overcommitted_nodes": len(dig(plain, "audit", "overcommitted_nodes") or {}) if plain else None,
        },
    }


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.2f}{unit}"
    return f"{v}{unit}"


def _summed_processes(half: dict[str, Any], field: str, own: bool = False) -> float | None:
    """``field`` summed over the half's processes (their supervisors left out: they only wait); with
    ``own``, only the system's own processes (0 for the plain half, which has none)."""
    procs = half.get("processes") or {}
    if not procs:
        return None
    return round(sum(float(p[field]) for n, p in procs.items() if not n.endswith(".supervisor")
                     and (not own or n.startswith(OWN_PROCESSES))), 1)


def comparison_rows(out: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """The three-way table's rows: a figure and its value in each half of ``HALVES`` (None: not measured)."""
    halves = [out.get(h) or {} for h, _ in HALVES]

    def each(*path: str) -> list[Any]:
        return [dig(h, *path) for h in halves]

    def bound(h: dict[str, Any]) -> str | None:
        return f"{dig(h, 'pods_bound', 'count')}/{dig(h, 'pods_bound', 'expected')}" if h else None

    return [
        ("jobs admitted / s", [dig(halves[0], "jobs_admitted", "overall_per_s"),
                               dig(halves[1], "jobs_admitted", "overall_per_s"), None]),
        ("jobs started / s", [dig(halves[0], "jobs_started", "overall_per_s"),
                              dig(halves[1], "jobs_started", "overall_per_s"), None]),
        ("pods created / s", each("pods_created", "overall_per_s")),
        ("pods bound / s (all)", each("pods_bound", "overall_per_s")),
        ("pods bound / s (steady, p10–p90)", each("pods_bound", "steady_per_s")),
        ("pods bound / s (busiest 5 s)", each("pods_bound", "peak_5s_per_s")),
        ("time until all Running (s)", each("time_until_all_running_s")),
        ("kubectl apply, slowest of the appliers (s)", [max(h.get("apply_s") or [0]) or None for h in halves]),
        ("gangs in one leaf", each("gangs", "share_in_one_leaf")),
        ("gangs in one NVLink domain", each("gangs", "share_in_one_nvlink_domain")),
        ("partial gangs", each("gangs", "partial_gangs")),
        ("longest partial gang (s)", each("gangs", "longest_partial_s")),
        ("GPU allocation while jobs wait", each("gangs", "gpu_allocation_while_waiting")),
        ("GPUs held by gangs not yet whole", each("gangs", "gpus_held_by_incomplete_gangs")),
        ("CPU seconds, all processes", [_summed_processes(h, "cpu_seconds") for h in halves]),
        ("CPU seconds, the system's own processes", [_summed_processes(h, "cpu_seconds", own=True) for h in halves]),
        ("peak RSS, all processes (MiB)", [_summed_processes(h, "peak_rss_mib") for h in halves]),
        ("peak RSS, the system's own processes (MiB)", [_summed_processes(h, "peak_rss_mib", own=True)
                                                        for h in halves]),
        ("pods bound / expected", [bound(h) for h in halves]),
        ("over-committed nodes (audit)", [len(dig(h, "audit", "overcommitted_nodes") or {}) if h else None
                                          for h in halves]),
    ]


def kueue_ahead(out: dict[str, Any]) -> list[str]:
    """The head-to-head figures on which Kueue did better than kubegang in this run."""
    ahead = []
    for name, (kg, kq, _) in comparison_rows(out):
        if not isinstance(kg, int | float) or not isinstance(kq, int | float):
            continue
        if _fmt(kq) == _fmt(kg):
            continue  # equal as the table shows them
        if (name in HIGHER_IS_BETTER and kq > kg) or (name in LOWER_IS_BETTER and kq < kg):
            why = WHY_KUEUE_AHEAD.get(name, "no structural reason known; see the discussion below the tables")
            ahead.append(f"{name}: Kueue {_fmt(kq)}, kubegang {_fmt(kg)} ({why})")
    return ahead


def three_way_table(out: dict[str, Any]) -> str:
    lines = ["| | " + " | ".join(label for _, label in HALVES) + " |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | " + " | ".join(_fmt(v) for v in values) + " |" for name, values in comparison_rows(out)]
    return "\n".join(lines)


def table(out: dict[str, Any]) -> str:
    kg, plain = out.get("kubegang") or {}, out.get("plain") or {}
    rows = [
        ("GPUJobs started / s (all, over time to last)", dig(kg, "jobs_started", "overall_per_s"), None),
        ("GPUJobs started / s (steady, p10–p90)", dig(kg, "jobs_started", "steady_per_s"), None),
        ("GPUJobs admitted / s", dig(kg, "jobs_admitted", "overall_per_s"), None),
        ("pods created / s", dig(kg, "pods_created", "overall_per_s"), dig(plain, "pods_created", "overall_per_s")),
        ("pods bound / s (all)", dig(kg, "pods_bound", "overall_per_s"), dig(plain, "pods_bound", "overall_per_s")),
        ("pods bound / s (steady, p10–p90)", dig(kg, "pods_bound", "steady_per_s"),
         dig(plain, "pods_bound", "steady_per_s")),
        ("pods bound / s (busiest 5 s)", dig(kg, "pods_bound", "peak_5s_per_s"),
         dig(plain, "pods_bound", "peak_5s_per_s")),
        ("time until all Running (s)", kg.get("time_until_all_running_s"), plain.get("time_until_all_running_s")),
        ("kubectl apply, slowest of the appliers (s)", max(kg.get("apply_s") or [0]) or None,
         max(plain.get("apply_s") or [0]) or None),
        ("pods bound / expected", f"{dig(kg, 'pods_bound', 'count')}/{dig(kg, 'pods_bound', 'expected')}"
         if kg else None, f"{dig(plain, 'pods_bound', 'count')}/{dig(plain, 'pods_bound', 'expected')}"
         if plain else None),
        ("over-committed nodes (audit)", len(dig(kg, "audit", "overcommitted_nodes") or {}) if kg else None,
         len(dig(plain, "audit", "overcommitted_nodes") or {}) if plain else None),
    ]
    lines = ["| | kubegang (GPUJobs) | plain kube-scheduler (pods) |", "|---|---:|---:|"]
    lines += [f"| {name} | {_fmt(a)} | {_fmt(b)} |" for name, a, b in rows]
    return "\n".join(lines)


def _process_table(out: dict[str, Any]) -> str:
    names = [h for h, _ in HALVES]
    lines = ["| process | " + " | ".join(f"{h} half: CPU s | peak RSS MiB" for h in names) + " |",
             "|---|" + "---:|---:|" * len(names)]
    procs = [dig(out, h, "processes") or {} for h in names]
    for name in COMPONENTS:
        values = [p.get(name) for p in procs]
        if all(v is None for v in values):
            continue
        lines.append(f"| {name} | " + " | ".join(f"{_fmt(v and v['cpu_seconds'])} | {_fmt(v and v['peak_rss_mib'])}"
                                                 for v in values) + " |")
    return "\n".join(lines)


def _write_table(out: dict[str, Any], top: int = 12) -> str:
    """The API server's writes in each half, busiest first (from apiserver_request_total)."""
    halves = [dig(out, h, "apiserver") or {} for h, _ in HALVES]
    writes = [h.get("writes") or {} for h in halves]
    keys = sorted(set().union(*writes), key=lambda k: -sum(w.get(k, 0) for w in writes))[:top]
    lines = ["| request | " + " | ".join(f"{h} half" for h, _ in HALVES) + " |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | " + " | ".join(_fmt(w.get(k)) for w in writes) + " |" for k in keys]
    for label, key in (("all writes", "writes_total"), ("writes per job", "writes_per_job"),
                       ("writes per pod", "writes_per_pod")):
        lines.append(f"| {label} | " + " | ".join(_fmt(h.get(key)) for h in halves) + " |")
    return "\n".join(lines)


def _status_write_lines(kubegang: dict[str, Any]) -> list[str]:
    """The operator's own count of its GPUJob status writes, by what each changed (empty for a run
    that did not record it)."""
    counts = kubegang.get("gpujob_status_writes") or {}
    if not counts:
        return []
    jobs = (kubegang.get("jobs_created") or {}).get("expected") or 0
    parts = ", ".join(f"{key or '(none)'} {n}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    per_job = f" ({sum(counts.values()) / jobs:.2f} per job)" if jobs else ""
    return [f"The operator's GPUJob status writes in the kubegang half, by what each carried and the phase it "
            f"wrote (`kubegang_operator_gpujob_status_writes_total`): {parts}{per_job}.", ""]


def markdown(out: dict[str, Any]) -> str:
    s = out.get("summary") or summary(out)
    m, v, w = out.get("machine", {}), out.get("versions", {}), out.get("workload", {})
    kg = out.get("kubegang") or {}
    errors = out.get("errors") or []
    kq = out.get("kueue") or {}
    problems = [*errors, *(f"kubegang job not started: {x}" for x in kg.get("jobs_not_started", [])[:5]),
                *(f"Kueue job not admitted: {x}" for x in kq.get("jobs_not_admitted", [])[:5])]
    contended = bool(out.get("contended"))
    fits = (f"{out.get('fill')} x the cluster's GPUs at most, and every pod runs {out.get('runtime_s')} s, so "
            "jobs wait for others to finish: the contended variant" if contended
            else f"at most {out.get('fill')} of the cluster, so everything fits at once")
    parts = [
        "# End-to-end throughput on the local control plane",
        "",
        f"Generated by `bench/e2e/run.py`; the raw figures are in `bench/e2e/"
        f"{'results-contended.json' if contended else 'results.json'}`."
        + (" The uncontended run is in [benchmarks-e2e.md](benchmarks-e2e.md)." if contended else
           " The contended variant (a burst of 1.5x the cluster, jobs that finish) is in "
           "[benchmarks-e2e-contended.md](benchmarks-e2e-contended.md)."),
        "",
        "The short-job sweep (1-GPU trials beside training gangs, overhead against plain pods) is in "
        "[benchmarks-sweep.md](benchmarks-sweep.md).",
        "",
        f"**Command:** `{out.get('command')}` (started {out.get('started')})",
        "",
        f"**Machine:** {m.get('cpus')} CPUs ({m.get('cpu_model')}), {m.get('memory_gib')} GiB memory, "
        f"Linux {m.get('kernel')}, Python {m.get('python')}; load average at start "
        f"{m.get('load_average_at_start')}. Every process (etcd, kube-apiserver, kube-scheduler, "
        "kube-controller-manager, kwok, the extender, the operators, the agent, Kueue, kubectl and this "
        "harness) shares these CPUs.",
        "",
        f"**Versions:** Kubernetes {v.get('KUBERNETES_VERSION')}, etcd {v.get('ETCD_VERSION')}, "
        f"kwok {v.get('KWOK_VERSION')}, Kueue {v.get('KUEUE_VERSION')} (`hack/versions.env`).",
        "",
        f"**Cluster:** shape `{out.get('shape')}`, {dig(out, 'cluster', 'gpu_nodes')} fake nodes, "
        f"{dig(out, 'cluster', 'gpus')} GPUs (kwok).",
        "",
        f"**Workload (seed {out.get('seed')}):** {w.get('jobs')} jobs, {w.get('pods')} pods, {w.get('gpus')} GPUs "
        f"({fits}); jobs by pod count "
        f"{w.get('jobs_by_pods')}, by GPUs per pod {w.get('jobs_by_gpus_per_pod')}. The generator and "
        "why it is shaped so are in `bench/e2e/_workload.py`. Jobs are dealt round-robin over "
        f"{out.get('leaves')} leaf GPUQueues of one root"
        + (f" whose nominal GPUs add up to {out['quota']:g}x the cluster's (`--quota`)"
           if out.get("quota", 1.0) != 1.0 else "")
        + f"; {out.get('operators')} operator replicas (one leader admits).",
        "",
        *([f"**Note:** {out['note']}", ""] if out.get("note") else []),
        *([f"**Scaled down:** issue 8 asks for 2,000 jobs; this run has {w.get('jobs')}.", ""]
          if w.get("jobs") not in (None, 2000) and not contended else []),
        "## Method",
        "",
        f"1. Baseline: every pod of every job as a plain pod (`schedulerName: default-scheduler`, no "
        "extender: kube-scheduler runs its default profile alone), largest GPU request first (the order "
        "in which a spreading scheduler cannot fragment a burst that fits), applied with "
        f"{out.get('appliers')} parallel `kubectl apply --server-side -f` of multi-document files.",
        "2. Kueue: `hack/cluster addon kueue up` (the real Kueue "
        f"{v.get('KUEUE_VERSION')}, kube-scheduler in its default profile, no extender); every job as a "
        "`batch/v1` Job with `parallelism = completions =` its pods and `kueue.x-k8s.io/queue-name`, "
        "which Kueue admits whole as one Workload (why Jobs and not pod groups: `bench/e2e/_kueue.py`); "
        "one ClusterQueue per leaf GPUQueue with the same nominal GPUs, all in one cohort (the GPUQueue "
        "root), a LocalQueue each; Topology Aware Scheduling on a ResourceFlavor of the GPU nodes with the "
        f"levels {kq.get('topology_levels') or '(the fabric labels, then the hostname)'}; the pod "
        f"templates carry {kq.get('topology_annotations') or 'the annotation that mirrors the GPUJob topology'} "
        "(a GPUJob without a topology gets the narrowest domain that holds it, widening level by level: "
        f"Kueue's preferred topology at the hostname). {kq.get('jobs_with_topology_assignment', '–')} of "
        f"{w.get('jobs')} Workloads were admitted with a TAS topology assignment. Kueue's client rate limit "
        "is set to the kubegang operator's (200/s, burst 400). Kueue is stopped after its half.",
        "3. `hack/cluster kubegang up`: CRDs, the extender (kube-scheduler restarted with the `kubegang` "
        "profile and the extender), a replay agent and the operators as local processes; the GPUQueue "
        "tree; then every GPUJob in the same way (jobs in generation order).",
        "4. Every half is observed with list+watch streams on the API server (pods, and GPUJobs or Jobs "
        "and Workloads, of the half's namespace); each transition is stamped when its watch event is "
        "read. t = 0 is the launch of the appliers. A pod is *bound* when `spec.nodeName` is set; a "
        "GPUJob is *admitted* and *started* when its `status.phase` is Admitted / Running, a Kueue Job "
        "*admitted* when its Workload's `Admitted` condition is True and *started* when the Job's "
        "`status.ready + succeeded` reaches its parallelism. Gang figures (bench/e2e/_gangs.py, one rule "
        "for all halves, pods grouped by the job label every half puts on them): a gang is *in one "
        "leaf / NVLink domain* when all its bound nodes share it (node labels, read by the placement "
        "core's `domain_chain`; on these shapes a node without an NVLink label is its own NVLink "
        "domain); *partial* when some but not all of its pods were bound for longer than 5 s or at the "
        "end; *GPU allocation while jobs wait* is the time-weighted share of the cluster's GPUs held by "
        "bound, unfinished pods from the first bind until the last job was whole, and *GPUs held by gangs "
        "not yet whole* the part of it held by pods whose gang could not run yet.",
        "5. CPU seconds (utime + stime) and peak memory (VmHWM) of each process come from /proc, by the "
        "pids hack/cluster records; CPU is counted over the measured window only.",
        "6. After each half the audit sums the GPU requests of bound, unfinished pods per node against "
        "allocatable (no node may be over-committed) and checks kubegang's pods run on their planned node.",
        "",
        "## Results",
        "",
        three_way_table(out),
        "",
        "Where Kueue is ahead of kubegang in this run:",
        "",
        *([f"- {line}" for line in kueue_ahead(out)] or ["- nowhere"]),
        "",
        *([f"{out['discussion']}", ""] if out.get("discussion") else []),
        "CPU and memory over each measured window:",
        "",
        _process_table(out),
        "",
        "Writes the API server served during each window, by verb and resource (every client's, the "
        "control plane's own included; `apiserver_request_total`):",
        "",
        _write_table(out),
        "",
        *_status_write_lines(kg),
        *cost.section(out),
        "## Against the goals",
        "",
        f"- **At least {JOB_STARTS_GOAL:.0f} GPUJob starts per second:** {s['goal_50_job_starts_per_s']} — "
        f"{_fmt(s['gpujob_starts_per_s'])} starts/s over the whole burst, "
        f"{_fmt(s['gpujob_starts_steady_per_s'])} in the steady middle (p10–p90).",
        f"- **The extender costs at most 25% of plain pod throughput** (kubegang's pods bound/s ≥ "
        f"{THROUGHPUT_RATIO_GOAL} x plain): {s['goal_extender_costs_at_most_25pct']} — ratio "
        f"{_fmt(s['pods_bound_ratio_kubegang_over_plain'])} over the whole burst, "
        f"{_fmt(s['pods_bound_steady_ratio_kubegang_over_plain'])} in the steady middle. The kubegang path "
        "includes the operator's admission and pod creation, so this ratio bounds the extender's cost "
        "from above.",
        f"- The extender's own time: {_fmt(s['extender_scheduler_verbs_ms_per_pod'], ' ms')} of server time per "
        "pod in its scheduler verbs (filter, prioritize, preempt; from its request-duration histogram). "
        "If kube-scheduler waited for all of it in series at the baseline's rate, it would lose "
        f"{_fmt(s['extender_cost_serial_model'])} of its throughput (serial model, HTTPS and JSON on the "
        "scheduler's side not included).",
        f"- Time until all Running: kubegang {_fmt(s['time_until_all_running_s']['kubegang'], ' s')}, "
        f"plain {_fmt(s['time_until_all_running_s']['plain'], ' s')}.",
        "",
    ]
    if problems:
        parts += ["## Problems in this run", "", *(f"- {p}" for p in problems), ""]
    return "\n".join(parts)
