"""The admission cycle: one decision at a time, the same code in the operator and in the simulator.

``AdmissionCycle.schedule`` is a generator: pure, synchronous, no I/O. It calls the quota port (in
memory) directly and *yields* every placement question and every action (:mod:`._types` effects) to
its driver, which answers them: the operator's leader awaits the extender over gRPC and the API
server, the simulator answers from its snapshot at once (``run_sync`` / ``run_async``). So the
figures of ``bench/`` are figures of this code, and a decision taken in production can be replayed.

One cycle, as Kueue's ``schedule()``:

1. **Candidates** — waiting jobs, less those found Unschedulable under the current queue tree (until
   the tree or the job changes) and those whose handling failed, until their backoff ends.
2. **Order** — the heads of the leaf queues in the quota port's order (priority, then fair share,
   then creation time), holders of a backfill reservation first among the heads of their priority
   (``Backfill.order``). A head that cannot be admitted steps aside for the next job of its
   queue (BestEffortFIFO backfill), for at most ``max_rounds`` rounds; a head that is preempting
   holds its queue, so nobody behind it takes the GPUs it is freeing (so does a blocked head under
   StrictFIFO). Each queue's jobs are sorted once per cycle (``QueueLanes``, by the port's ``rank``),
   so a round costs the number of queues, not of waiting jobs.
3. **Quota** — up the tree, for each flavour the job may use (Kueue's flavour assignment). Never →
   Unschedulable; not now → preemption, else Queued.
4. **Placement** — ``Plan`` the whole gang (nodes reserved for another job's backfill excluded),
   flavour by flavour; a pod larger than every node → Unschedulable; no room → preemption, else
   Queued. With ``predicted_tenants``, a job kept off reserved nodes by its time limit but predicted
   to leave them in time (``QuotaPort.predicted_run_seconds``) is planned again with them, as their
   tenant; a holder evicts tenants past their prediction once that alone lets it start (before step 5).
   Then take the quota, ``Reserve`` the placement and ``Admit``: the next decision counts both.
   A refusal is kept with the placement side's *room epoch* (``schedule``'s ``room``), which only a
   change that can free room moves (a pod gone, a reservation released, a node changed); the same
   question at the same epoch is answered from memory, not asked again (``_ask_plan``).
5. **Preemption** — one victim chooser: the quota policy offers candidates (least disruptive first);
   quota picks the fewest it needs gone (``kubegang.quota.quota_victims``); one ``WhatIf`` with those
   ``gone`` adds the cheapest set the GPUs still need on top of them, among the other candidates only
   (nobody when quota's victims alone free a place), and a quota victim that quota and the GPUs could
   both do without once those are added is not evicted (``_choose_victims``); quota confirms the
   preemptor then fits. Only then are the victims evicted, whole; the preemptor waits until their
   pods are gone, and the nodes it freed are its own meanwhile (``CLAIM_SECONDS``): a job behind it
   that took them would only be evicted in turn.
6. **Backfill reservation** — a head blocked (on GPUs or quota) longer than the policy's threshold
   reserves the nodes it would get once running gangs are gone (``WhatIf`` over them, waited for,
   not evicted): Slurm's EASY backfill. Where they have time limits, the gangs that end first, so
   its latest start is known and later jobs that end by then may still use those nodes; otherwise
   the fewest gangs, and later jobs are placed without those nodes until it starts. With several
   reservations (``max_reservations``), a later one may take an earlier holder's nodes from when that
   holder is gone by its limit (reservations in time, as Slurm's); otherwise they are disjoint.
7. **Outcome** — a typed ``Entry`` per job (``AdmitResult``, ``WaitReason``, the message);
   jobs never reached this cycle are ``WaitingInQueue``.

Any error while handling one job becomes that job's ``AdmissionError`` entry, what its attempt
took is given back, and it is retried with backoff while the cycle goes on with the others.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic

from kubegang.admission._ports import QuotaPort
from kubegang.admission._types import (
    Admit,
    AdmitResult,
    Effect,
    Entry,
    Evict,
    J,
    P,
    Plan,
    PlanAnswer,
    Preemptible,
    Release,
    Reserve,
    Verdict,
    WaitReason,
    WhatIf,
    WhatIfAnswer,
    Workload,
)
from kubegang.quota import Backfill, BackfillPolicy, QueueLanes, Rank

log = logging.getLogger("kubegang.admission")

Cycle = Generator[Effect[J, P], Any, list[Entry[J, P]]]
"""What ``schedule`` returns: send each effect's answer back in; the return value is the entries."""
_Step = Generator[Effect[J, P], Any, Entry[J, P]]

BACKOFF_FIRST_SECONDS = 1.0
"""First retry delay of a job whose handling raised; doubled per failure up to ``BACKOFF_MAX_SECONDS``."""
BACKOFF_MAX_SECONDS = 300.0
"""Longest retry delay of a failing job (a spec change retries it at once)."""
CLAIM_SECONDS = 300.0
"""How long the nodes a preemptor freed stay its own: no other gang is placed there meanwhile, so the
GPUs it evicted for are not taken by a job behind it (which it would then evict again, forever)."""
CLUSTER_BOUND = frozenset({WaitReason.EXCEEDS_CLUSTER})
"""Unschedulable reasons that the cluster (new nodes), not the queue tree, can change: retried."""
_Placed = tuple[tuple[str, ...], frozenset[str]]
"""A ``WhatIf`` that found a place: the victims it needs (among those offered) and the nodes."""
_Question = tuple[int, frozenset[str], str | None]
"""A ``Plan`` as the cycle asks it for one flavour: the job's generation, the excluded nodes and the
preferred domain."""


@dataclasses.dataclass(frozen=True)
class CycleSettings:
    """How the cycle walks the queues."""

    max_rounds: int = 64
    """Rounds per cycle in which a head that cannot be admitted steps aside for the next job.

    Each round tries one head per queue, and every cycle starts again from the front, so this is how
    deep the cycle looks behind blocked heads. At 8, one queue whose first 8 jobs were large gangs
    waiting for GPUs hid every small job behind them (head-of-line blocking: on the fair yardstick's
    tuning seeds 1-GPU jobs waited as long as 128-GPU ones, and 65 jobs that fit were left waiting
    per pass; ``bench/sim/why_waits.py``). A blocked try costs a quota check and at most one Plan."""
    backfill: BackfillPolicy = dataclasses.field(default_factory=BackfillPolicy)
    """Backfill past blocked heads, and when a blocked head reserves its nodes."""


class AdmissionCycle(Generic[J, P]):
    """The admission cycle and the state it keeps between cycles (memos, backoff, reservations)."""

    def __init__(self, quota: QuotaPort[J], *, settings: CycleSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.quota = quota
        self.settings = settings or CycleSettings()
        self.clock = clock
        """Seconds (monotonic in the operator, simulated time in the simulator)."""
        self.backfill = Backfill(self.settings.backfill)
        self._never: dict[str, int] = {}
        """UID -> generation of jobs found Unschedulable under the current queue tree."""
        self._retry_at: dict[str, tuple[int, float, int]] = {}
        """UID -> (generation, time of the next try, failures so far) of jobs whose handling raised."""
        self._preempting: dict[str, frozenset[str]] = {}
        """Preemptor UID -> UIDs of the victims it waits for."""
        self._claims: dict[str, tuple[frozenset[str], float]] = {}
        """Preemptor UID -> (nodes it freed by eviction, until when no one else is placed there)."""
        self._quota_claims: set[str] = set()
        """Preemptors holding the quota their evictions freed (``QuotaPort.claim``) until their victims
        are gone. Without it a job of another queue was admitted into that quota at once, the preemptor
        evicted it in turn, and the two gangs of that queue took turns for ever (the e2e tree example)."""
        self._admitted_uid: str | None = None
        """The job the current attempt admitted (an error after that must not give its quota back)."""
        self._overlaps = 0
        """Reservations refused in this cycle because their nodes overlapped a holder's, or planned by
        time limits and not found: after ``max_reservations`` of them no other blocked job asks (each
        ``WhatIf`` is a preemption search, and with several held most blocked jobs would want the same
        free nodes)."""
        self._running_memo: tuple[list[J], dict[str, float | None]] | None = None
        """This cycle's running gangs and their ends (``QuotaPort.ends_at``), until one is admitted or
        evicted: every blocked head would otherwise ask for all of them."""
        self._planned_with: dict[str, frozenset[str]] = {}
        """Holder UID -> the running gangs when its reservation was planned: it is planned again only
        once one of them has gone (ended early, evicted), the one thing that can move it earlier."""
        self._refusals: dict[str, dict[tuple[int, bool], tuple[_Question, PlanAnswer[P]]]] = {}
        """Job UID -> (flavour, as a tenant?) -> its last ``Plan`` refused there, with the answer and its
        room epoch (``_ask_plan``): one per flavour, so that a job of several flavours keeps them all."""
        self._room: int | None = None
        """The placement side's room epoch this cycle (``schedule``'s ``room``); None once this cycle
        released or evicted anything, so that no refusal is answered from memory after it."""
        self.plans_remembered = 0
        """``Plan`` questions answered from a kept refusal instead of the port, since this cycle object
        was made (what ``bench.sim.plan_calls`` and ``bench.scale`` report)."""

    # -- state the driver keeps current ---------------------------------------------------------
    def tree_changed(self) -> None:
        """The queue tree was rebuilt: jobs found Unschedulable under the old one are tried again."""
        self._never.clear()
        self._quota_claims.clear()  # the rebuilt tree holds admitted jobs only
        self._refusals.clear()  # a flavour's position in ``flavor_options`` may differ under the new tree

    def _release_claim(self, uid: str) -> None:
        if uid in self._quota_claims:
            self._quota_claims.discard(uid)
            self.quota.release(uid)

    def forget(self, uid: str) -> None:
        """``uid`` left the queue (deleted, suspended): drop everything kept for it."""
        self._never.pop(uid, None)
        self._retry_at.pop(uid, None)
        self._planned_with.pop(uid, None)
        self._preempting.pop(uid, None)
        self._claims.pop(uid, None)
        self._refusals.pop(uid, None)
        self._release_claim(uid)
        self.backfill.forget(uid)

    def reservation(self, uid: str) -> frozenset[str] | None:
        """The nodes reserved for ``uid`` by backfill, if it holds a reservation."""
        return self.backfill.reservation(uid)

    # -- the cycle ----------------------------------------------------------------------------------
    def schedule(self, pending: Sequence[J], *, holds_pods: Callable[[str], bool],
                 room: int | None = None) -> Cycle[J, P]:
        """One cycle over ``pending``; ``holds_pods(uid)``: whether that gang still has pods (victims).

        ``room``: the placement side's room epoch, read just before this cycle (the extender's ``Room``);
        a ``Plan`` refused at this same epoch, asked again the same way, is answered from memory. None:
        every question is asked."""
        now = self.clock()
        self._room = room
        self._overlaps = 0
        self._running_memo = None
        self._claims = {uid: claim for uid, claim in self._claims.items() if claim[1] > now}
        waiting = {job.uid for job in pending}
        for uid in self._quota_claims - waiting:  # admitted, deleted or suspended meanwhile
            self._release_claim(uid)
        # (1) Candidates.
        candidates = [job for job in pending
                      if self._never.get(job.uid) != job.generation and not self._backing_off(job, now)]
        lanes, entries = self._lanes(candidates)
        tried: set[str] = {entry.job.uid for entry in entries}
        held_queues: set[str] = set()
        last_tried: dict[str, Entry[J, P]] = {}
        """Queue -> the outcome of the last of its jobs tried: what the ones not reached wait behind."""
        for _ in range(self.settings.max_rounds):
            # (2) Order: the heads of the queues, each queue's next job once its head was tried.
            ordered, failed = self._order(lanes.fronts(tried), now)
            entries += failed
            tried |= {entry.job.uid for entry in failed}
            heads = [job for job in ordered if job.uid not in tried and job.queue not in held_queues]
            if not heads:
                break
            for job in heads:
                entry = yield from self._attempt(job, holds_pods, now)
                entries.append(entry)
                tried.add(job.uid)
                last_tried[job.queue] = entry
                if entry.reason is WaitReason.PREEMPTING or (
                        entry.result is AdmitResult.QUEUED and not self.backfill.steps_aside):
                    held_queues.add(job.queue)
                if entry.result is AdmitResult.UNSCHEDULABLE and entry.reason not in CLUSTER_BOUND:
                    self._never[job.uid] = job.generation
        # (7) Outcome of the jobs not reached: one message per queue and namespace, however many wait.
        messages: dict[tuple[str, str], str] = {}
        for job in candidates:
            if job.uid not in tried:
                where = (job.queue, _namespace(job.key))
                message = messages.get(where)
                if message is None:
                    message = messages[where] = _behind(job, last_tried.get(job.queue))
                entries.append(Entry(job, AdmitResult.QUEUED, WaitReason.WAITING_IN_QUEUE, message))
        return entries

    def _lanes(self, candidates: list[J]) -> tuple[QueueLanes[J], list[Entry[J, P]]]:
        """Each queue's candidates in the queue's order (the quota port's ``rank``), sorted once for all
        of the cycle's rounds; a job that cannot be ranked gets its own error entry."""
        ranked: list[tuple[J, Rank | None]] = []
        failed: list[Entry[J, P]] = []
        for job in candidates:
            try:
                ranked.append((job, self.quota.rank(job)))
            except Exception as exc:
                failed.append(self._failed(job, exc))
        return QueueLanes(ranked, _uid), failed

    def _order(self, candidates: list[J], now: float) -> tuple[list[J], list[Entry[J, P]]]:
        """The quota port's order, reservation holders first among their priority; a job that breaks it
        is set aside."""
        try:
            ordered = self.quota.order(candidates)
            failed: list[Entry[J, P]] = []
        except Exception:
            log.exception("ordering %d waiting jobs failed; finding the job that breaks it", len(candidates))
            good, failed = [], []
            for job in candidates:
                try:
                    self.quota.order([job])
                except Exception as exc:
                    failed.append(self._failed(job, exc))
                else:
                    good.append(job)
            try:
                ordered = self.quota.order(good)
            except Exception as exc:  # no single job breaks it: a bug of the port; try again next cycle
                log.error("ordering still fails without the failing jobs: %s", exc)
                ordered = []
        return self._holders_first(ordered), failed

    def _holders_first(self, ordered: list[J]) -> list[J]:
        """``ordered`` with reservation holders first among the heads of their priority (``Backfill.order``,
        the one rule). The quota port's order is priority first (across queues and trees alike), so this
        keeps the fair-share order within a priority and moves holders only. Holders are heads of the
        quota tree (they passed quota to be blocked), so the jobs after the last of them keep their place
        and only the heads up to it are read as the quota tree sees them."""
        last = max((i for i, job in enumerate(ordered) if self.backfill.reservation(job.uid) is not None), default=-1)
        if last < 0:
            return ordered
        by_uid = {job.uid: job for job in ordered[:last + 1]}
        heads = self.backfill.order([self.quota.pending_job(job) for job in ordered[:last + 1]])
        return [by_uid[head.job_id] for head in heads] + ordered[last + 1:]

    def _attempt(self, job: J, holds_pods: Callable[[str], bool], now: float) -> _Step[J, P]:
        """Steps 3 to 6 for one head, its errors turned into its own entry."""
        self._admitted_uid = None
        try:
            entry = yield from self._try_admit(job, holds_pods, now)
        except Exception as exc:
            if self._admitted_uid != job.uid:
                # Whatever the failed attempt took is given back (no-ops when it took nothing).
                self._quota_claims.discard(job.uid)
                self.quota.release(job.uid)
                self._room = None  # a released placement may free room that kept refusals did not see
                try:
                    yield Release(job)
                except Exception:
                    log.exception("releasing the placement of %s after a failure failed", job.key)
            return self._failed(job, exc)
        self._retry_at.pop(job.uid, None)
        return entry

    def _try_admit(self, job: J, holds_pods: Callable[[str], bool], now: float) -> _Step[J, P]:
        if not job.requests_gpus:
            return self._entry(job, AdmitResult.UNSCHEDULABLE, WaitReason.NO_GPUS_REQUESTED,
                               "the job asks for no GPU: set spec.gpusPerReplica >= 1, an nvidia.com/gpu limit in "
                               "spec.template, or spec.gpuFraction")
        if job.uid in self._quota_claims:
            waiting_for = self._preempting.get(job.uid)
            if waiting_for and any(holds_pods(uid) for uid in waiting_for):
                return self._entry(job, AdmitResult.QUEUED, WaitReason.PREEMPTING,
                                   "waiting for preempted gangs to terminate")
            self._release_claim(job.uid)  # its victims are gone: decided afresh, from the quota it held
        # (3) Quota up the tree, for each flavour the job may use.
        options = [(option, self.quota.can_admit(option)) for option in self.quota.flavor_options(job)]
        flavour = {id(option): i for i, (option, _) in enumerate(options)}
        possible = [(option, verdict) for option, verdict in options if not verdict.never]
        if not possible:
            reason = "; ".join(dict.fromkeys(verdict.reason for _, verdict in options))
            cause = options[0][1].cause if options else None
            return self._entry(job, AdmitResult.UNSCHEDULABLE, cause or WaitReason.EXCEEDS_QUEUE_CAPACITY, reason)
        waiting_for = self._preempting.get(job.uid)
        if waiting_for and any(holds_pods(uid) for uid in waiting_for):
            # Their GPUs are not free until their pods are gone; planning now would race them.
            return self._entry(job, AdmitResult.QUEUED, WaitReason.PREEMPTING,
                               "waiting for preempted gangs to terminate")
        self._preempting.pop(job.uid, None)
        ends_by = None if job.time_limit is None else now + job.time_limit
        excluded = (job.excluded_nodes | self.backfill.excluded_for(job.uid, ends_by)
                    | self._claimed_by_others(job.uid))
        fitting = [option for option, verdict in possible if verdict.ok]
        if not fitting:
            first, verdict = possible[0]
            reclaimed = yield from self._reclaim(first, excluded, now)
            if reclaimed is not None:
                return reclaimed
            waiting = f"waiting for quota in queue {job.queue}: {verdict.reason}"
            entry = yield from self._preempt_or_queue(first, WaitReason.QUOTA_EXHAUSTED, waiting, excluded)
            return (yield from self._blocked(first, entry, now))

        # (4) Placement: the first flavour that places the whole gang.
        refusals: list[PlanAnswer[P]] = []
        chosen: tuple[J, P] | None = None
        for option in fitting:
            answer: PlanAnswer[P] = yield from self._ask_plan(option, (flavour[id(option)], False), excluded,
                                                              job.previous_domain)
            if answer.placement is not None:
                chosen = (option, answer.placement)
                break
            refusals.append(answer)
        lenders: list[str] = []
        predicted_end: float | None = None
        if chosen is None and not all(answer.never for answer in refusals):
            # (4b) Predicted tenants: reserved nodes it would leave in time by its predicted run.
            predicted = self.quota.predicted_run_seconds(job) if self.backfill.policy.predicted_tenants else None
            predicted_end = None if predicted is None else now + predicted
            lenders = self.backfill.lenders_to(job.uid, ends_by, predicted_end)
            if lenders:
                lodging = (job.excluded_nodes | self.backfill.excluded_for(job.uid, predicted_end)
                           | self._claimed_by_others(job.uid))
                for option in fitting:
                    answer = yield from self._ask_plan(option, (flavour[id(option)], True), lodging,
                                                       job.previous_domain)
                    if answer.placement is not None:
                        chosen = (option, answer.placement)
                        break
        if chosen is None:
            if all(answer.never for answer in refusals):
                return self._entry(job, AdmitResult.UNSCHEDULABLE, WaitReason.EXCEEDS_CLUSTER, refusals[0].reason)
            reclaimed = yield from self._reclaim(fitting[0], excluded, now)
            if reclaimed is not None:
                return reclaimed
            first_refusal = next(answer.reason for answer in refusals if not answer.never)
            entry = yield from self._preempt_or_queue(
                fitting[0], WaitReason.INSUFFICIENT_GPUS, f"waiting for GPUs: {first_refusal}", excluded)
            return (yield from self._blocked(fitting[0], entry, now))
        option, placement = chosen
        taken = self.quota.admit(option)
        if not taken.ok:
            return self._entry(option, AdmitResult.QUEUED, WaitReason.QUOTA_EXHAUSTED,
                               f"waiting for quota in queue {job.queue}: {taken.reason}")
        reserved: Verdict = yield Reserve(option, placement)
        if not reserved.ok:
            self.quota.release(option.uid)
            return self._entry(option, AdmitResult.QUEUED, WaitReason.RESERVATION_FAILED,
                               f"waiting for GPUs: {reserved.reason}")
        self._admitted_uid = option.uid
        yield Admit(option, placement)
        self._running_memo = None
        self.backfill.forget(option.uid)
        self._planned_with.pop(option.uid, None)
        self._claims.pop(option.uid, None)
        message = f"admitted to queue {job.queue}"
        if lenders and predicted_end is not None:
            self.backfill.lodge(option.uid, lenders, predicted_end)
            message += (f"; may run on nodes reserved for another job, as its run is predicted to end in "
                        f"{predicted_end - now:.0f}s (before that job's latest start there): if it runs longer "
                        "and that job can start, it is evicted and queued again")
        return Entry(option, AdmitResult.ADMITTED, message=message, placement=placement)

    def _ask_plan(self, option: J, where: tuple[int, bool], excluded: frozenset[str], domain: str | None
                  ) -> Generator[Effect[J, P], Any, PlanAnswer[P]]:
        """``Plan`` for ``option``, or the refusal kept for the same question at this cycle's room epoch.

        Only a change that can free room (a gang or pod gone, a reservation released, a node changed)
        can turn a refusal into a placement; the cycle's own reservations only take room. The placement
        side moves its epoch on each such change, so a refusal given at the epoch this cycle read is
        still the answer: a head blocked on GPUs is not searched for again at every step (in the operator
        each ``Plan`` is a gRPC call and a search of the extender's ledger). A placement is never kept.
        ``where``: the flavour (position in ``flavor_options``) and whether it is asked as a tenant.
        """
        question: _Question = (option.generation, excluded, domain)
        kept = self._refusals.get(option.uid, {}).get(where)
        if (self._room is not None and kept is not None and kept[0] == question
                and kept[1].room == self._room):
            self.plans_remembered += 1
            return kept[1]
        answer: PlanAnswer[P] = yield Plan(option, excluded, domain)
        if answer.placement is None and answer.room is not None:
            self._refusals.setdefault(option.uid, {})[where] = (question, answer)
        else:
            self._refusals.pop(option.uid, None)  # placed: nothing of the job's is refused any more
        return answer

    # (5) Preemption -------------------------------------------------------------------------------
    def _claimed_by_others(self, uid: str) -> frozenset[str]:
        out: set[str] = set()
        for holder, (nodes, _) in self._claims.items():
            if holder != uid:
                out |= nodes
        return frozenset(out)

    def _preempt_or_queue(self, job: J, reason: WaitReason, message: str, excluded: frozenset[str]) -> _Step[J, P]:
        victims, nodes = yield from self._choose_victims(job, excluded)
        if not victims:
            return self._entry(job, AdmitResult.QUEUED, reason, message)
        return (yield from self._evict(job, victims, nodes, f"{message}; preempting"))

    def _evict(self, job: J, victims: Sequence[tuple[J, str]], nodes: frozenset[str], message: str) -> _Step[J, P]:
        """Evict ``victims`` (each with why) for ``job``, which then waits for them and holds the ``nodes``
        they free (``CLAIM_SECONDS``); ``message`` is followed by their names."""
        self._room = None  # a driver may free the victims' GPUs at once (the simulator does)
        for victim, why in victims:
            yield Evict(victim, job, why)
            self.backfill.unlodge(victim.uid)
            self._quota_claims.discard(victim.uid)
        self._running_memo = None
        if job.uid not in self._quota_claims and self.quota.claim(job).ok:
            self._quota_claims.add(job.uid)
        self._preempting[job.uid] = frozenset(victim.uid for victim, _ in victims)
        self._claims[job.uid] = (nodes, self.clock() + CLAIM_SECONDS)
        names = ", ".join(victim.key for victim, _ in victims)
        return Entry(job, AdmitResult.PREEMPTING, WaitReason.PREEMPTING, f"{message} {names}",
                     victims=tuple(victim for victim, _ in victims))

    def _reclaim(self, job: J, excluded: frozenset[str], now: float
                 ) -> Generator[Effect[J, P], Any, Entry[J, P] | None]:
        """A reservation holder evicts its tenants that outlived their predicted run, once that alone
        lets it start (the fewest of them: ``WhatIf`` over those tenants); None while other gangs, or
        tenants still within their prediction, hold what it needs."""
        late = self.backfill.overdue_tenants(job.uid, now)
        if not late:
            return None
        running = {r.uid: r for r in self._running_ends()[0]}
        overdue = tuple(running[uid] for uid in late if uid in running)
        if not overdue:
            return None
        answer: WhatIfAnswer = yield WhatIf(job, overdue, excluded)
        if not answer.victims or any(uid not in running for uid in answer.victims):
            return None
        if not self.quota.can_admit_without(job, answer.victims).ok:
            return None  # their GPUs would not be enough for its quota: they run on
        why = "to let the job whose reserved nodes it ran on start: it ran past its predicted run time"
        return (yield from self._evict(job, [(running[uid], why) for uid in answer.victims], answer.nodes,
                                       "its reserved nodes are free but for tenants that ran past their "
                                       "predicted run time; evicting"))

    def _choose_victims(self, job: J, excluded: frozenset[str]
                        ) -> Generator[Effect[J, P], Any, tuple[list[tuple[J, str]], frozenset[str]]]:
        """The one victim chooser: whole gangs, among what policy allows, that let ``job`` both fit its
        quota and be placed off ``excluded`` (its Plan's exclusions: room freed on nodes reserved for
        another job would not let it run), each of them needed, and the nodes it would be placed on; no
        victims when no such set exists (nobody is evicted then).

        Quota's victims (``quota_victims``, least disruptive first) go in any case, so the placement
        port is asked one ``WhatIf`` with them ``gone`` and the other candidates offered: its planner
        adds the cheapest set (fewest GPUs) that the GPUs still need with them gone, nobody when they
        alone free a place. When it adds any, a quota victim may have become needless (the added gangs
        free quota and GPUs too): each of them, most disruptive first, that quota can do without
        (``can_admit_without``) is put back, and kept running if the gang is still placeable with the
        rest gone (one more ``WhatIf``, nothing offered). Fitting is monotone in what is freed, on both
        sides, so each victim left is needed. One ``WhatIf`` when the planner adds no one (or finds
        nothing); otherwise one more per quota victim that quota could do without.
        """
        none: tuple[list[tuple[J, str]], frozenset[str]] = ([], frozenset())
        candidates = self.quota.preemption_candidates(job)
        if not candidates:
            return none
        by_uid = {c.job.uid: c for c in candidates}
        for_quota = self.quota.quota_victims(job, list(by_uid))
        if for_quota is None:
            return none
        position = {uid: i for i, uid in enumerate(by_uid)}
        for_quota = sorted(dict.fromkeys(for_quota), key=position.__getitem__)
        others = [uid for uid in by_uid if uid not in for_quota]
        answer = yield from self._placeable_with(job, [by_uid[uid].job for uid in others], excluded,
                                                 gone=[by_uid[uid].job for uid in for_quota])
        if answer is None:
            return none  # not placeable even with every candidate gone
        added = sorted(answer[0], key=position.__getitem__)
        nodes = answer[1]
        if added:
            for uid in reversed(for_quota.copy()):
                rest = [other for other in for_quota if other != uid] + added
                if not self.quota.can_admit_without(job, rest).ok:
                    continue
                trial = yield from self._placeable_with(job, [], excluded, gone=[by_uid[u].job for u in rest])
                if trial is not None:
                    for_quota.remove(uid)
                    nodes = trial[1]
        return self._confirmed(job, for_quota + added, by_uid, nodes)

    def _placeable_with(self, job: J, offered: Sequence[J], excluded: frozenset[str], *, gone: Sequence[J] = ()
                        ) -> Generator[Effect[J, P], Any, _Placed | None]:
        """Whether ``job`` is placeable off ``excluded`` with the gangs ``gone`` evicted and some of
        ``offered``: the placement port's victims (those of ``offered`` it needs gone too) and the nodes
        it would be placed on; None if not."""
        answer: WhatIfAnswer = yield WhatIf(job, tuple(offered), excluded, gone=tuple(gone))
        if answer.victims is None:
            return None
        allowed = {victim.uid for victim in offered}
        unknown = [uid for uid in answer.victims if uid not in allowed]
        if unknown:
            log.error("WhatIf for %s returned gangs it was not offered %s; taken as no place", job.key, unknown)
            return None
        return answer.victims, answer.nodes

    def _confirmed(self, job: J, chosen: Sequence[str], by_uid: dict[str, Preemptible[J]], nodes: frozenset[str]
                   ) -> tuple[list[tuple[J, str]], frozenset[str]]:
        """``chosen`` with why each may go and ``nodes``, once quota confirms ``job`` then fits; none else."""
        if not chosen or not self.quota.can_admit_without(job, chosen).ok:
            return [], frozenset()
        return [(by_uid[uid].job, by_uid[uid].why) for uid in chosen], nodes

    # (6) Backfill reservation -----------------------------------------------------------------
    def _blocked(self, job: J, entry: Entry[J, P], now: float) -> _Step[J, P]:
        """A head that waits: start its blocked clock, and reserve its nodes once it is due."""
        if entry.result is not AdmitResult.QUEUED:
            return entry
        self.backfill.blocked(job.uid, now)
        held = self.backfill.held(job.uid)
        after = self.quota.reserve_after(job)
        if held is None and self._overlaps < self.backfill.policy.max_reservations:
            found: tuple[frozenset[str], float | None] | None = None
            if self.backfill.reservation_due(job.uid, now, after=after):
                found = yield from self._reservation_nodes(job, now, planned_only=False)
            elif self.backfill.could_plan_sooner(job.uid, now, after=after):
                found = yield from self._reservation_nodes(job, now, planned_only=True)
                # Each try is a few WhatIf searches: after max_reservations fruitless ones per cycle no
                # other blocked job tries (the next cycle does).
                self._overlaps += found is None
            # Reservations overlap only in time (this one after the other holder has gone): two holders
            # each excluded from the other's nodes would wait for each other for ever.
            overlaps = found is not None and self.backfill.overlaps(job.uid, found[0], found[1])
            self._overlaps += overlaps
            if found is not None and found[0] and not overlaps:
                self.backfill.reserve(job.uid, found[0], starts_by=found[1], ends_by=_plus(found[1], job.time_limit))
                self._planned_with[job.uid] = self._running_now()
                held = self.backfill.held(job.uid)
                log.info("%s reserves %d nodes for backfill after waiting", job.key, len(found[0]))
        elif held is not None and held.starts_by is not None and self.backfill.policy.replan \
                and self._planned_with.get(job.uid, frozenset()) - self._running_now():
            again = yield from self._reservation_nodes(job, now, planned_only=True)
            self._planned_with[job.uid] = self._running_now()
            if again is not None and again[0] and not self.backfill.overlaps(job.uid, again[0], again[1]):
                self.backfill.reserve(job.uid, again[0], starts_by=again[1], ends_by=_plus(again[1], job.time_limit))
                held = self.backfill.held(job.uid)
        if held is None:
            return entry
        if held.starts_by is None:
            message = (f"{entry.message}; holds a backfill reservation of {len(held.nodes)} nodes "
                       "that later jobs may not use")
        else:
            message = (f"{entry.message}; holds a backfill reservation of {len(held.nodes)} nodes, free for it within "
                       f"{max(held.starts_by - now, 0.0):.0f}s by the time limits there; later jobs may use them only "
                       "if their timeLimitSeconds ends sooner")
        return dataclasses.replace(entry, message=message, reservation=held.nodes)

    def _running_ends(self) -> tuple[list[J], dict[str, float | None]]:
        if self._running_memo is None:
            running = self.quota.running()
            self._running_memo = running, {r.uid: self.quota.ends_at(r) for r in running}
        return self._running_memo

    def _running_now(self) -> frozenset[str]:
        return frozenset(r.uid for r in self._running_ends()[0])

    def _reservation_nodes(self, job: J, now: float, *, planned_only: bool
                           ) -> Generator[Effect[J, P], Any, tuple[frozenset[str], float | None] | None]:
        """The nodes ``job`` would reserve and its latest start on them (None: not known).

        With time limits, the nodes of the shortest prefix of running gangs, soonest end first, whose
        departure lets it run (a binary search of ``WhatIf`` over prefixes: the answer's victims are
        among them, so it can start once the last of those ends); otherwise, or when it needs a gang
        without a limit gone, the fewest running gangs' nodes (``WhatIf`` over all of them), start
        unknown. ``planned_only``: only a reservation whose start is known (None otherwise)."""
        every, ends = self._running_ends()
        running = [r for r in every if r.uid != job.uid]
        # Its tenants are gone by their predicted end, or evicted then (``_reclaim``): not by their limits,
        # which would move its start later with every tenant it takes.
        tenants = self.backfill.tenants(job.uid)
        if tenants:
            ends = {uid: max(now, tenants[uid]) if uid in tenants else end for uid, end in ends.items()}
        base = job.excluded_nodes | self._claimed_by_others(job.uid)
        limited = sorted((r for r in running if ends[r.uid] is not None), key=lambda r: ends[r.uid] or 0.0)

        def at(prefix: int) -> frozenset[str]:
            # Off claimants' nodes, and other holders' while they hold them at that start (in time).
            start = max((ends[r.uid] or now for r in limited[:prefix]), default=now)
            return base | self.backfill.excluded_for(job.uid, _plus(start, job.time_limit), starts_at=start)

        if limited:
            best: WhatIfAnswer = yield WhatIf(job, tuple(limited), at(len(limited)))
            if best.victims is not None:
                low, high = 0, len(limited)  # a short prefix that lets it run: in (low - 1, high]
                while low < high:
                    middle = (low + high) // 2
                    answer: WhatIfAnswer = yield WhatIf(job, tuple(limited[:middle]), at(middle))
                    if answer.victims is not None:
                        best, high = answer, middle
                    else:
                        low = middle + 1
                victims = best.victims or ()
                if planned_only and not victims:
                    return None  # it fits on the GPUs now: quota holds it, and nodes kept idle would not help
                starts_by = max((ends[uid] or now for uid in victims), default=now)
                # On nodes another holder is gone from only later, it starts once that holder has gone.
                for holder, held in self.backfill.reservations():
                    if holder != job.uid and best.nodes & held.nodes and held.ends_by is not None:
                        starts_by = max(starts_by, held.ends_by)
                return (best.nodes, starts_by) if best.nodes else None
        if planned_only:
            return None
        unlimited = [r for r in running if ends[r.uid] is None]
        anyone: WhatIfAnswer = yield WhatIf(job, tuple(limited + unlimited), base | self.backfill.excluded_for(job.uid))
        return (anyone.nodes, None) if anyone.victims is not None and anyone.nodes else None

    # -- outcomes ------------------------------------------------------------------------------
    def _entry(self, job: J, result: AdmitResult, reason: WaitReason, message: str) -> Entry[J, P]:
        return Entry(job, result, reason, message)

    def _backing_off(self, job: J, now: float) -> bool:
        entry = self._retry_at.get(job.uid)
        return entry is not None and entry[0] == job.generation and now < entry[1]

    def back_off(self, job: J, failures: int) -> float:
        """Leave ``job`` out of the cycle for the backoff of its ``failures``-th failure in a row (its
        spec unchanged); returns the seconds. The driver calls it too, for a failure it sees after the
        cycle admitted the job (its pods refused), so one rule paces every retry."""
        delay = _backoff_seconds(failures)
        self._retry_at[job.uid] = (job.generation, self.clock() + delay, failures)
        return delay

    def _failed(self, job: J, exc: Exception) -> Entry[J, P]:
        log.error("admission of %s failed: %s", job.key, exc, exc_info=exc)
        generation, _, failures = self._retry_at.get(job.uid, (job.generation, 0.0, 0))
        failures = failures + 1 if generation == job.generation else 1
        delay = self.back_off(job, failures)
        return Entry(job, AdmitResult.ERROR, WaitReason.ADMISSION_ERROR,
                     f"admission failed ({type(exc).__name__}: {exc}); retrying in {delay:.0f}s")


def _backoff_seconds(failures: int) -> float:
    """The wait after the ``failures``-th failure in a row: doubling from the first, capped."""
    return float(min(BACKOFF_FIRST_SECONDS * 2 ** (max(failures, 1) - 1), BACKOFF_MAX_SECONDS))


def _uid(job: Workload) -> str:
    return job.uid


def _plus(start: float | None, seconds: float | None) -> float | None:
    return None if start is None or seconds is None else start + seconds


def _namespace(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def _behind(job: Workload, blocker: Entry[Any, Any] | None) -> str:
    """Why a job not reached this cycle waits: the job of its queue the cycle stopped at, named when it is
    of the same namespace (a leaf may serve several teams; another team's job names are not theirs to
    read), with that job's own reason."""
    if blocker is None:
        return f"waiting in queue {job.queue} behind jobs admitted first"
    why = (blocker.reason or blocker.result).value
    if _namespace(blocker.job.key) == _namespace(job.key):
        return f"waiting in queue {job.queue} behind {blocker.job.key} ({why})"
    return f"waiting in queue {job.queue} behind a job of another namespace ({why})"


def _advance(cycle: Cycle[J, P], reply: Any, error: Exception | None) -> tuple[bool, Any]:
    """Send ``reply`` (or throw ``error``) into ``cycle``: (True, its entries) when it is done, else
    (False, the next effect)."""
    try:
        return False, cycle.throw(error) if error is not None else cycle.send(reply)
    except StopIteration as stop:
        return True, stop.value


def run_sync(cycle: Cycle[J, P], answer: Callable[[Effect[J, P]], Any]) -> list[Entry[J, P]]:
    """Drive ``cycle`` with a synchronous effect handler (the simulator); an error of the handler is
    raised into the cycle, which makes it that job's AdmissionError."""
    reply: Any = None
    error: Exception | None = None
    while True:
        done, value = _advance(cycle, reply, error)
        if done:
            return value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = answer(value)
        except Exception as exc:
            error = exc


async def run_async(cycle: Cycle[J, P], answer: Callable[[Effect[J, P]], Any]) -> list[Entry[J, P]]:
    """Drive ``cycle`` with an asynchronous effect handler (the operator: gRPC, API writes)."""
    reply: Any = None
    error: Exception | None = None
    while True:
        done, value = _advance(cycle, reply, error)
        if done:
            return value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = await answer(value)
        except Exception as exc:
            error = exc
