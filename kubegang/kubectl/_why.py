"""``kubectl gang why JOB``: why a GPUJob is not running, where it stands, and what would change it.

Every number comes from the engine (:mod:`._engine`): the condition the operator wrote, the position by
``kubegang.quota.queue_positions``, the quota refusal of the tree (with the limit that binds), the
placer's best domain, and one dry-run pass of the admission cycle (would it be admitted, where, whom
it would preempt). Jobs the user may not see are counted, never named.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubegang.admission import AdmitResult, WaitReason
from kubegang.kubectl._engine import Engine
from kubegang.kubectl._render import Style, age, gpus, table
from kubegang.kubectl._runtime import RunTimes
from kubegang.operator._cache import HeldBack
from kubegang.operator._conditions import CondType, get_condition
from kubegang.operator._extender_placement import gang_request
from kubegang.operator._job import JobView
from kubegang.placement import MILLI, Placement, Unplaceable
from kubegang.quota import LimitKind, Refusal, Unschedulable

_PHASE_CONDITION = {
    "Queued": CondType.QUEUED, "Unschedulable": CondType.UNSCHEDULABLE, "Admitted": CondType.ADMITTED,
    "Running": CondType.RUNNING, "Succeeded": CondType.SUCCEEDED, "Failed": CondType.FAILED,
    "Suspended": CondType.SUSPENDED,
}


def _condition(job: JobView) -> Mapping[str, Any]:
    cond_type = _PHASE_CONDITION.get(job.phase.value)
    cond = get_condition(job.status.get("conditions") or [], cond_type) if cond_type else None
    return cond or {}


def _held_back(engine: Engine, job: JobView, now: dt.datetime) -> HeldBack | None:
    """The operator's own rule (``ClusterCache.held_back``): whether it leaves ``job`` out of its cycle
    now, and what it writes on it then."""
    engine.pending()  # held_back is as of the last pending call
    return next((h for h in engine.cache.held_back(now) if h.job.uid == job.uid), None)


def _held_back_report(engine: Engine, held: HeldBack) -> tuple[dict[str, Any], str]:
    """``heldBack`` of the report, and what the job waits for before it can be admitted."""
    out: dict[str, Any] = {"reason": held.reason.value, "message": held.message}
    if held.reason is WaitReason.PREVIOUS_PODS_TERMINATING:
        out["pods"] = list(held.subject)
        one = len(held.subject) == 1
        return out, (f"{'pod' if one else 'pods'} {_some(list(held.subject))} of its previous attempt "
                     f"{'is' if one else 'are'} gone")
    job = held.job
    missing = engine.cache.missing_source_pods(job)  # the count the operator's message names
    out["missingPods"], out["replicas"] = missing, job.replicas
    return out, (f"the {missing} missing {'pod' if missing == 1 else 'pods'} of its pod group exist "
                 f"({job.replicas - missing} of {job.replicas} do)")


def _job_row(engine: Engine, job: JobView, now: dt.datetime) -> dict[str, Any]:
    return {"job": job.key, "queue": job.queue, "gpus": engine.gpus(job), "priority": engine.priority(job),
            "age": age(job.created, now), "phase": job.phase.value}


def _leaves(engine: Engine, queues: set[str]) -> set[str]:
    """The queues of ``queues`` that are nobody's parent: the only ones whose status counts a job once."""
    parents = {(body.get("spec") or {}).get("parent") for body in engine.cache.queues.values()}
    return {q for q in queues if q not in parents}


def _hidden_pending(engine: Engine, queues: set[str]) -> int:
    """Waiting jobs of ``queues`` the operator counted (GPUQueue status) that the user cannot see.

    The operator writes a parent's ``pending`` as its whole subtree's, so only leaves are summed (else
    a job would count once per level). Every hidden waiting job counts, ahead of this one or behind
    it: their priorities and creation times are not readable here, so their order is unknown."""
    if not engine.jobs_hidden:
        return 0
    leaves = _leaves(engine, queues)
    visible = sum(1 for j in engine.pending() if j.queue in leaves)
    counted = sum(int((engine.cache.queues[q].get("status") or {}).get("pending") or 0)
                  for q in leaves if q in engine.cache.queues)
    return max(0, counted - visible)


def _quota(engine: Engine, job: JobView) -> dict[str, Any]:
    """The tree's answer for each flavour the job may use, with the numbers of its refusal."""
    out = []
    for option in engine.book.flavor_options(job):
        verdict = engine.book.can_admit(option)
        row: dict[str, Any] = {"flavor": option.flavor, "fits": verdict.ok, "never": verdict.never,
                               "reason": verdict.reason}
        if job.queue in engine.book.tree.leaves:
            decision = engine.book.tree.can_admit(job.queue, engine.book.usage_of(option))
            if isinstance(decision, Refusal | Unschedulable):
                row["shortfalls"] = [{"flavor": s.flavor, "needs": s.needed / MILLI,
                                      "available": s.available / MILLI} for s in decision.shortfalls]
            if option.flavor is not None:
                limit = engine.book.tree.binding_limit(job.queue, option.flavor)
                row["binds"] = {"kind": limit.kind.value, "queue": limit.queue, "available": limit.available / MILLI,
                                "withinNominal": limit.within_nominal / MILLI, "lent": limit.lent / MILLI}
        out.append(row)
    return {"fits": any(r["fits"] for r in out), "flavors": out}


def _placement_now(engine: Engine, job: JobView) -> dict[str, Any]:
    """Where the extender's engine would put the gang now if quota and the queue let it (its first
    flavour, as the cycle plans it: a flavour that is a GPU product places on that product)."""
    option = engine.book.flavor_options(job)[0]
    result = engine.ledger.plan(gang_request(option, option.excluded_nodes, option.previous_domain))
    if isinstance(result, Placement):
        return {"fits": True, "level": result.level.label, "domain": result.domain, "nodes": list(result.nodes)}
    assert isinstance(result, Unplaceable)
    return {"fits": False, "reason": result.reason, "bestDomain": result.best_domain, "bestPods": result.best_pods,
            "pods": job.replicas, "never": result.never}


def _next_cycle(engine: Engine, job: JobView) -> dict[str, Any]:
    entries = engine.dry_run()
    entry = entries.get(job.uid)
    if entry is None:
        return {"considered": False}
    out: dict[str, Any] = {"considered": True, "result": entry.result.value,
                           "reason": entry.reason.value if entry.reason else None, "message": entry.message}
    if entry.placement is not None:
        out["domain"] = entry.placement.domain
        out["level"] = entry.placement.level
        out["nodes"] = sorted(entry.placement.nodes)
    if entry.victims:
        out["preempts"] = [v.key if engine.visible(v.uid) else "(a job you cannot see)" for v in entry.victims]
    blocked = engine.blocked(job.uid)
    if blocked is not None and entry.result is not AdmitResult.ADMITTED:
        out["bestDomain"], out["bestPods"] = blocked.best_domain, blocked.best_pods
    admitted_before = [e.job.key for e in entries.values() if e.result is AdmitResult.ADMITTED and e.job.uid != job.uid]
    out["admittedBefore"] = len(admitted_before)
    return out


def _estimate(engine: Engine, job: JobView, now: dt.datetime) -> dict[str, Any]:
    """When the gang could start if nothing else arrives: when the fewest running gangs whose end is
    known and that it waits for (quota, then GPUs: the cycle's own victim chooser, not evicting) end."""
    times = RunTimes(engine.cache.all_jobs())
    running = [r for r in engine.book.running() if r.uid != job.uid]
    ends = {r.uid: times.expected_end(r) for r in running}
    known = sorted((r for r in running if ends[r.uid] is not None), key=lambda r: ends[r.uid] or now)
    if not known:
        return {"known": False, "why": "no running gang has a known run time (kubegang.io/fake-runtime, "
                "activeDeadlineSeconds, or finished jobs of its queue)"}
    option = engine.book.flavor_options(job)[0]
    for_quota = engine.book.quota_victims(option, [r.uid for r in known])
    if for_quota is None:
        return {"known": False, "why": "quota would not fit even after every gang with a known run time ends"}
    # As the cycle asks it: quota's gangs end in any case, so the GPUs' answer is what must end on top.
    answer = engine.what_if(option, [r for r in known if r.uid not in for_quota],
                            gone=[r for r in known if r.uid in for_quota])
    if answer.victims is None:
        return {"known": False, "why": "the GPUs would not fit even after every gang with a known run time ends"}
    waits = list(dict.fromkeys([*for_quota, *answer.victims]))
    if not waits:
        return {"known": True, "at": now.isoformat(), "in": "0s", "waitsFor": [],
                "basis": "nothing running has to end first"}
    latest = max((end for uid in waits if (end := ends.get(uid)) is not None), default=now)
    return {"known": True, "at": latest.isoformat(), "in": age(now, latest) if latest > now else "0s",
            "waitsFor": [engine.visible(uid).key if engine.visible(uid) else "(a job you cannot see)"  # type: ignore[union-attr]
                         for uid in waits],
            "basis": "run times of the running gangs (" + ", ".join(sorted({rt[1] for uid in waits
                      if (j := engine.visible(uid)) is not None and (rt := times.run_time(j)) is not None}))
                     + "); an estimate: jobs arriving meanwhile are not counted"}


def why_report(engine: Engine, job: JobView, now: dt.datetime) -> dict[str, Any]:
    """The machine form of ``kubectl gang why`` (and of ``what-if``, for a job added to the engine)."""
    cond = _condition(job)
    report: dict[str, Any] = {"job": job.key, "queue": job.queue, "phase": job.phase.value,
                              "reason": cond.get("reason"), "message": cond.get("message"),
                              "gpus": engine.gpus(job), "priority": engine.priority(job)}
    report["hidden"] = dict(engine.objects.hidden)
    if job.phase.value not in ("Pending", "Queued", "Unschedulable"):
        placement = job.placement
        if placement is not None and job.admitted_at:
            report["placement"] = {"level": placement.level, "domain": placement.domain,
                                   "nodes": sorted(placement.nodes)}
        return report
    positions = engine.positions()
    pos = positions.get(job.uid)
    cohort_queues = {q for q in engine.book.tree.queues if job.queue in engine.book.tree.queues
                     and engine.book.tree.path(q)[-1] == engine.book.tree.path(job.queue)[-1]}
    if pos is not None:
        ahead = [_job_row(engine, j, now) for uid in pos.ahead if (j := engine.visible(uid)) is not None]
        report["position"] = {"inQueue": pos.in_queue, "cohort": pos.cohort, "cohortRoot": pos.root,
                              "waitingInQueue": sum(1 for p in positions.values() if p.queue == job.queue)}
        report["ahead"] = ahead
        report["aheadNotVisible"] = _hidden_pending(engine, cohort_queues or {job.queue})
    written = job.status.get("queuePosition")
    if isinstance(written, Mapping):
        report["operatorPosition"] = dict(written)
    report["quota"] = _quota(engine, job)
    unseen = engine.placement_unseen
    missing = engine.missing_priority_class(job)
    if missing is not None:  # the operator holds it back, whatever quota and GPUs say
        report["priorityClassNotFound"] = missing
    held_back = _held_back(engine, job, now)
    if held_back is not None:  # the operator leaves it out of its cycle for now, and says why on the job
        report["heldBack"], until = _held_back_report(engine, held_back)
    # No nodes: every placement answer would be "no place", which is not true.
    report["placementNow"] = {"unknown": unseen} if unseen is not None else _placement_now(engine, job)
    if missing is not None:  # the cycle leaves it out: not a candidate, it neither waits nor preempts
        report["nextCycle"] = {"considered": False, "result": "Unschedulable",
                               "reason": WaitReason.PRIORITY_CLASS_NOT_FOUND.value, "message": missing}
        report["estimate"] = {"known": False, "why": "its spec.priorityClassName names no PriorityClass: it is "
                              "not admitted until the class is created or the field is changed"}
    elif held_back is not None:  # likewise, until what it waits for is resolved (whatever quota and GPUs say)
        report["nextCycle"] = {"considered": False, "result": "Queued", "reason": held_back.reason.value,
                               "message": held_back.message}
        report["estimate"] = {"known": False, "why": f"it is not admitted until {until}"}
    elif unseen is not None:
        report["nextCycle"] = {"unknown": unseen}
        report["estimate"] = {"known": False, "why": unseen}
    else:
        report["estimate"] = _estimate(engine, job, now)
        first = len(pos.ahead) if pos is not None else 0
        if report["estimate"]["known"] and first:
            report["estimate"]["basis"] += f" (not counting the {first} job(s) ahead of it, which go first)"
        report["nextCycle"] = _next_cycle(engine, job)
    if unseen is None and engine.placement_partial:
        report["placementNow"]["partial"] = report["nextCycle"]["partial"] = engine.placement_partial
    message = str(cond.get("message") or "")
    held = engine.reservations_held()
    own = held.pop(job.uid, None)
    if own:
        report["backfillReservation"] = {"nodes": sorted(own)}
    others = [{"job": view.key if (view := engine.visible(uid)) else "(a job you cannot see)",
               "nodes": sorted(nodes)} for uid, nodes in held.items()]
    if others:
        report["reservationsOfOthers"] = others
    if cond.get("reason") == WaitReason.PREEMPTING.value:
        report["preempting"] = message
    return report


_LIMIT_WORDS = {
    LimitKind.NOMINAL.value: "bound by its nominal (queue {queue} has no parent to borrow from)",
    LimitKind.BORROWING_LIMIT.value: "bound by the borrowingLimit of queue {queue}",
    LimitKind.POOL.value: "bound by what queue {queue}'s tree has unused (its queues' nominal less what they "
                          "keep and use)",
}
"""How the why page says which limit binds (``kubegang.quota.LimitKind``)."""


def _quota_line(report: Mapping[str, Any], said: str) -> list[str]:
    """One line per flavour: its numbers, and the tree's reason unless the condition already said it."""
    out = []
    for row in report["flavors"]:
        state = "fits" if row["fits"] else ("can never fit" if row["never"] else "does not fit now")
        numbers = "; ".join(f"needs {gpus(s['needs'])}, can get {gpus(s['available'])}"
                            for s in row.get("shortfalls", []))
        line = f"  {row['flavor']}: {state}" + (f" ({numbers})" if numbers else "")
        binds = row.get("binds")
        if binds and not row["fits"] and not row["never"]:
            line += f"; {_LIMIT_WORDS[binds['kind']].format(**binds)}"
        if row["reason"] and row["reason"] not in said:
            line += f": {row['reason']}"
        out.append(line)
    return out


def why_lines(report: Mapping[str, Any], style: Style) -> list[str]:
    """The human form of ``kubectl gang why``."""
    phase = report["phase"]
    colour = style.good if phase in ("Running", "Succeeded") else style.bad if phase in (
        "Unschedulable", "Failed") else style.warn
    size = f"{gpus(report['gpus'])} GPUs, priority {report['priority']}, queue {report['queue']}"
    if report.get("whatIf"):
        lines = [f"{style.bold('What if GPUJob ' + report['job'])} were submitted now ({size}; nothing is created):"]
    else:
        lines = [f"{style.bold('GPUJob ' + report['job'])}: {colour(phase)}"
                 + (f" ({report['reason']})" if report.get("reason") else "") + f", {size}"]
    if report.get("message"):
        lines.append(f"  {report['message']}")
    placed = report.get("placement")
    if placed:
        lines.append(f"Placed in {placed['level']} {placed['domain']} on {len(placed['nodes'])} nodes: "
                     f"{_some(placed['nodes'])}")
    pos = report.get("position")
    if pos:
        lines.append(f"Position: {pos['inQueue']} of {pos['waitingInQueue']} waiting in queue {report['queue']}; "
                     f"its queue's head is {pos['cohort']}{_nth(pos['cohort'])} in cohort {pos['cohortRoot']}'s "
                     "fair-share order")
    if "ahead" in report:
        rows = [[a["job"], a["queue"], gpus(a["gpus"]), a["priority"], a["age"]] for a in report["ahead"]]
        hidden = report.get("aheadNotVisible", 0)
        if rows or hidden:
            lines.append("Jobs ahead:")
            if rows:
                lines += table(["job", "queue", "gpus", "priority", "age"], rows, indent="  ")
            if hidden:
                lines.append(f"  + {hidden} waiting job(s) of other namespaces in this cohort (not visible to you), "
                             "ahead of this one or behind it")
        else:
            lines.append("Jobs ahead: none")
    if "quota" in report:
        lines.append("Quota:")
        lines += _quota_line(report["quota"], str(report.get("message") or ""))
    now = report.get("placementNow")
    if now and "unknown" in now:
        lines.append(f"Placement: unknown, {now['unknown']}")
    elif now:
        if now["fits"]:
            lines.append(f"Placement now: fits in {now['level']} {now['domain']} ({len(now['nodes'])} nodes)")
        else:
            best = (f"; best domain {now['bestDomain']} holds {now['bestPods']} of {now['pods']} pods"
                    if now.get("bestDomain") else "")
            lines.append(f"Placement now: no place: {now['reason']}{best}")
    nxt = report.get("nextCycle")
    if nxt and "unknown" not in nxt:
        if not nxt["considered"] and nxt.get("reason"):
            said = nxt["message"] in str(report.get("message") or "")
            lines.append(f"Next cycle: not considered ({nxt['reason']})" + (", as above" if said else
                                                                             f": {nxt['message']}"))
        elif not nxt["considered"]:
            lines.append("Next cycle: not considered (it would not be a head)")
        elif nxt["result"] == AdmitResult.ADMITTED.value:
            lines.append(style.good(f"Next cycle: would be admitted in {nxt.get('domain') or '?'} on "
                                    f"{len(nxt.get('nodes') or [])} nodes"))
        elif nxt["message"] and nxt["message"] in str(report.get("message") or ""):
            lines.append(f"Next cycle: still {nxt['result']} ({nxt['reason']}), as above")
        else:
            lines.append(f"Next cycle: {nxt['result']} ({nxt['reason']}): {nxt['message']}")
        if nxt.get("preempts"):
            lines.append(f"  would preempt: {', '.join(nxt['preempts'])}")
        if nxt.get("partial"):
            lines.append(style.warn(f"  (placement from a partial view: {nxt['partial']})"))
    own = report.get("backfillReservation")
    if own:
        lines.append(f"Backfill: holds a reservation of {len(own['nodes'])} nodes ({_some(own['nodes'])}) that "
                     "later jobs are placed around until it starts")
    for other in report.get("reservationsOfOthers") or []:
        lines.append(f"Backfill: {other['job']} holds {len(other['nodes'])} nodes ({_some(other['nodes'])}); "
                     "this job is placed around them")
    est = report.get("estimate")
    if est:
        if est["known"] and not est["waitsFor"]:
            lines.append(f"Estimate: {est['basis']}")
        elif est["known"]:
            lines.append(f"Estimate: could start in about {est['in']} (by {est['at']}), when "
                         f"{', '.join(est['waitsFor']) or 'nothing'} will have ended; {est['basis']}")
        else:
            lines.append(f"Estimate: none ({est['why']})")
    for kind, why in (report.get("hidden") or {}).items():
        lines.append(style.warn(f"Note: {kind}: {why}"))
    return lines


def _some(names: list[str], shown: int = 8) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _nth(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
