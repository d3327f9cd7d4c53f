"""The kubegang policy backfills past a blocked big gang, and the big gang still starts within its bound."""

from __future__ import annotations

from typing import Any

from bench.sim import Job, KubegangPolicy, RunResult, Step, Wrapped, load_cluster, simulate
from kubegang.quota import BackfillPolicy

HOUR = 3600.0


def _gang(job_id: str, arrival: float, pods: int, duration: float) -> Job:
    return Job(job_id, arrival, pods, 8, duration, "team-0", 0, "NVIDIA-H100-80GB-HBM3")


def _run(policy: BackfillPolicy) -> RunResult:
    # 4 nodes x 8 GPUs, one queue. "long" holds 3 nodes for 10 h; "big" needs all 4 and is the head;
    # behind it, 1-node jobs arrive every 30 min for 40 h and run 1 h each: one node is always free
    # for them, and without a bound they keep it busy forever.
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_gang("long", 0.0, 3, 10 * HOUR), _gang("big", 1.0, 4, HOUR)]
    jobs += [_gang(f"small-{i}", 2.0 + i * HOUR / 2, 1, HOUR) for i in range(80)]
    return simulate(KubegangPolicy(backfill=policy), cluster, jobs)


def test_a_small_gang_that_fits_starts_while_the_big_head_waits_and_the_head_starts_within_its_bound() -> None:
    result = _run(BackfillPolicy(reserve_after_seconds=2 * HOUR))
    assert result.started["small-0"] == 2.0  # backfilled past the blocked head
    # Reserved after 2 h of waiting: it waits at most for what runs on its nodes then ("long", and the
    # small jobs started before the reservation, 1 h each).
    assert result.started["big"] <= 10 * HOUR + HOUR
    assert result.metrics.completed == 82
    assert result.metrics.partial_gpu_hours == 0.0


def test_without_a_bound_the_big_head_starves_behind_backfilled_jobs() -> None:
    result = _run(BackfillPolicy(reserve_after_seconds=None))
    assert result.started["small-0"] == 2.0
    assert result.started["big"] > 40 * HOUR  # only once the stream of small jobs ends


def test_the_sweeps_share_scaled_rule_lets_a_smaller_gang_reserve_sooner() -> None:
    from bench.sim.sweep_backfill import _ShareScaledBackfill

    sizes = {"half": 32, "quarter": 16}
    backfill = _ShareScaledBackfill(BackfillPolicy(reserve_after_seconds=8 * HOUR), sizes.__getitem__, 64)
    backfill.blocked("half", 0.0)
    backfill.blocked("quarter", 0.0)
    assert not backfill.reservation_due("quarter", 4 * HOUR - 1)
    assert backfill.reservation_due("quarter", 4 * HOUR)
    assert not backfill.reservation_due("half", 8 * HOUR - 1)
    assert backfill.reservation_due("half", 8 * HOUR)


class _DisjointReservations(Wrapped):
    """Checks after every pass that no node is reserved for two waiting gangs at once."""

    def __init__(self, inner: KubegangPolicy) -> None:
        super().__init__(inner)
        self.policy = inner
        self.most_held = 0
        """Most "big-*" gangs holding a reservation at once (small ones may hold disjoint nodes too)."""

    def schedule(self, now: float) -> Step:
        step = self.inner.schedule(now)
        held = [nodes for uid in self.policy.waiting_jobs
                if (nodes := self.policy.cycle.reservation(uid)) is not None]
        seen: set[str] = set()
        for nodes in held:
            assert not nodes & seen, f"at {now}: nodes {sorted(nodes & seen)} reserved twice"
            seen |= nodes
        bigs = [uid for uid in self.policy.waiting_jobs
                if uid.startswith("big") and self.policy.cycle.reservation(uid) is not None]
        self.most_held = max(self.most_held, len(bigs))
        return step


def test_two_gangs_that_need_the_same_nodes_do_not_both_reserve_them() -> None:
    # 4 nodes; "long" holds 3 for 10 h; "big-1" and "big-2" each need all 4 and may reserve at once,
    # two reservations allowed. Both would reserve the same 4 nodes, each then excluded from the
    # other's: neither could ever start. The second must wait for the first instead.
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_gang("long", 0.0, 3, 10 * HOUR), _gang("big-1", 1.0, 4, HOUR), _gang("big-2", 2.0, 4, HOUR)]
    jobs += [_gang(f"small-{i}", 3.0 + i * HOUR / 2, 1, HOUR) for i in range(20)]
    observed = _DisjointReservations(
        KubegangPolicy(backfill=BackfillPolicy(reserve_after_seconds=0.0, max_reservations=2)))
    result = simulate(observed, cluster, jobs, horizon=100 * HOUR)
    assert observed.most_held == 1
    assert result.started["big-1"] == 10 * HOUR
    assert 11 * HOUR <= result.started["big-2"] <= 12 * HOUR
    assert result.metrics.completed == len(jobs)


def _limited(job_id: str, arrival: float, pods: int, duration: float, limit: float) -> Job:
    return Job(job_id, arrival, pods, 8, duration, "team-0", 0, "NVIDIA-H100-80GB-HBM3", time_limit=limit)


def _limits_run(use_limits: bool) -> RunResult:
    # 4 nodes. "a" holds one for 10 h, "b" one for 2 h, "c" one for 3 h (their limits = run times);
    # "big" needs three and is blocked from t=1. With limits it reserves the nodes whose gangs end
    # first (b's, c's and the free one): it can start at 3 h at the latest. "quick" (limit 1.5 h) may
    # use the free reserved node meanwhile, it is gone by then; "slow" (limit 5 h) may not.
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_limited("a", 0.0, 1, 10 * HOUR, 10 * HOUR), _limited("b", 0.0, 1, 2 * HOUR, 2 * HOUR),
            _limited("c", 0.0, 1, 3 * HOUR, 3 * HOUR), _limited("big", 1.0, 3, HOUR, HOUR),
            _limited("quick", 2.0, 1, HOUR, 1.5 * HOUR), _limited("slow", 3.0, 1, HOUR, 5 * HOUR)]
    policy = BackfillPolicy(reserve_after_seconds=None, planned_reserve_after_seconds=0.0)
    return simulate(KubegangPolicy(backfill=policy, use_limits=use_limits), cluster, jobs, horizon=100 * HOUR)


def test_with_time_limits_a_blocked_gang_reserves_the_nodes_that_free_first_and_short_jobs_fill_them() -> None:
    result = _limits_run(use_limits=True)
    assert result.started["quick"] == 2.0  # ends before "big" could start: backfilled on its nodes
    assert result.started["big"] == 3 * HOUR  # when "c", the last of b and c, ends; not a's 10 h
    assert result.started["slow"] >= 3 * HOUR  # would run past the reservation's start: kept off
    assert result.metrics.completed == 6


def test_without_time_limits_the_planned_reservation_is_never_taken() -> None:
    # The same jobs whose limits the cycle does not see: no start is known, and reserve_after_seconds
    # is None, so "big" reserves nothing and "slow" takes the free node as soon as "quick" leaves it.
    result = _limits_run(use_limits=False)
    assert result.started["slow"] == 2.0 + HOUR
    assert result.started["big"] >= 3 * HOUR
    assert result.metrics.completed == 6


def _replan_run(replan: bool) -> RunResult:
    # 4 nodes: "a" (limit 10 h) ends after 1 h, "b" runs its 2 h, "c" its 3 h; "big" needs three and
    # reserves the free node, b's and c's (start by 3 h). Once a ends early, the nodes that free first
    # are the free one, a's and b's (start by 2 h). "mid" (limit 2.5 h) arrives at 1.5 h: on a's node
    # it would keep big waiting for c.
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_limited("a", 0.0, 1, HOUR, 10 * HOUR), _limited("b", 0.0, 1, 2 * HOUR, 2 * HOUR),
            _limited("c", 0.0, 1, 3 * HOUR, 3 * HOUR), _limited("big", 1.0, 3, HOUR, HOUR),
            _limited("mid", 1.5 * HOUR, 1, 2.5 * HOUR, 2.5 * HOUR)]
    policy = BackfillPolicy(reserve_after_seconds=None, planned_reserve_after_seconds=0.0, replan=replan)
    return simulate(KubegangPolicy(backfill=policy), cluster, jobs, horizon=100 * HOUR)


def test_a_reservation_is_planned_again_when_a_gang_ends_before_its_limit() -> None:
    assert _replan_run(replan=True).started["big"] == 2 * HOUR
    assert _replan_run(replan=False).started["big"] == 3 * HOUR  # mid took a's node meanwhile


class _Reservations(Wrapped):
    """Records every reservation the big gangs held, pass by pass."""

    def __init__(self, inner: KubegangPolicy) -> None:
        super().__init__(inner)
        self.policy = inner
        self.seen: list[tuple[float, dict[str, Any]]] = []

    def schedule(self, now: float) -> Step:
        step = self.inner.schedule(now)
        held = {uid: held for uid, held in self.policy.cycle.backfill.reservations() if uid.startswith("big")}
        self.seen.append((now, held))
        return step


def test_with_time_limits_a_second_reservation_takes_the_first_holders_nodes_from_when_it_is_gone() -> None:
    # 4 nodes: "a" holds 2 for 10 h, "b" 1 for 3 h, one is free (limits = run times). "big-1" (2 nodes,
    # limit 2 h, runs 1 h) reserves the free node and b's: it starts by 3 h and is gone by 5 h.
    # "big-2" (all 4 nodes, limit 1 h) needs a's nodes and big-1's: with two reservations it reserves
    # all 4 *after* big-1 (Slurm's reservations in time), from 10 h; disjoint ones could not hold it.
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_limited("a", 0.0, 2, 10 * HOUR, 10 * HOUR), _limited("b", 0.0, 1, 3 * HOUR, 3 * HOUR),
            _limited("big-1", 1.0, 2, HOUR, 2 * HOUR), _limited("big-2", 2.0, 4, HOUR, HOUR),
            _limited("long", 3.0, 1, HOUR, 20 * HOUR)]
    policy = BackfillPolicy(reserve_after_seconds=None, planned_reserve_after_seconds=0.0, max_reservations=2)
    observed = _Reservations(KubegangPolicy(backfill=policy))
    result = simulate(observed, cluster, jobs, horizon=100 * HOUR)
    both = [held for _, held in observed.seen if len(held) == 2]
    assert both, "big-2 never reserved while big-1 held its reservation"
    first, second = both[0]["big-1"], both[0]["big-2"]
    assert first.starts_by == 3 * HOUR and first.ends_by == 5 * HOUR
    assert second.nodes > first.nodes and second.starts_by == 10 * HOUR and second.ends_by == 11 * HOUR
    assert result.started["big-1"] == 3 * HOUR and result.started["big-2"] == 10 * HOUR
    # "long" (limit 20 h) would run past both reservations' starts: kept off until big-2 has started.
    assert result.started["long"] >= 10 * HOUR
    assert result.metrics.completed == 5


def _tenant_run(predicted: bool, tenant_runs: float) -> RunResult:
    # 4 nodes. "p" (limit 5 h) ran 30 min from 0: a run time of its class, (team-0, 8 GPUs, 5 h). "a" holds
    # a node for 10 h, "b" one for 2 h, "c" one for 3 h; "big" needs three from 1 h and reserves b's, c's
    # and the free node, starting by 3 h at the latest. "t" (limit 5 h) would run past that by its
    # limit, but its class predicts 30 min: a tenant of the free reserved node.
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_limited("p", 0.0, 1, HOUR / 2, 5 * HOUR), _limited("a", 0.0, 1, 10 * HOUR, 10 * HOUR),
            _limited("b", 0.0, 1, 2 * HOUR, 2 * HOUR), _limited("c", 0.0, 1, 3 * HOUR, 3 * HOUR),
            _limited("big", HOUR, 3, HOUR, HOUR), _limited("t", HOUR + 1.0, 1, tenant_runs, 5 * HOUR)]
    policy = BackfillPolicy(reserve_after_seconds=None, planned_reserve_after_seconds=0.0,
                            predicted_tenants=predicted)
    return simulate(KubegangPolicy(backfill=policy), cluster, jobs, horizon=100 * HOUR)


def test_a_job_predicted_to_end_before_the_reservation_runs_on_its_nodes_and_the_holder_still_starts_in_time() -> None:
    result = _tenant_run(predicted=True, tenant_runs=HOUR / 2)
    assert result.started["t"] == HOUR + 1.0  # a tenant at once, gone at 1.5 h
    assert result.started["big"] == 3 * HOUR and result.metrics.evictions == 0
    # Without predictions its limit keeps it off the reserved node until "big" has run.
    assert _tenant_run(predicted=False, tenant_runs=HOUR / 2).started["t"] >= 3 * HOUR


def test_a_tenant_that_runs_past_its_prediction_is_evicted_when_the_holder_could_start() -> None:
    result = _tenant_run(predicted=True, tenant_runs=4 * HOUR)
    assert result.started["big"] == 3 * HOUR  # not delayed by the tenant: evicted for it
    assert result.metrics.evictions == 1
    assert result.metrics.evicted_gpu_hours == (3 * HOUR - HOUR - 1.0) * 8 / HOUR
    assert result.started["t"] >= 4 * HOUR  # queued again, ran when "big" had ended
    assert result.metrics.completed == 6
