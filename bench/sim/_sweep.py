"""The seed's short-job sweep, simulated: 500 one-GPU trials of five minutes through one queue while
multi-node training gangs hold most of the cluster, under kubegang and under plain kube-scheduler pods.

The sweep driver is the end-to-end benchmark's (``bench/e2e/_sweep_driver.py``: Ray Tune's or
Katib's way): it keeps as many trials in flight as the gangs leave GPUs and creates the next trial
when it learns one is over, from the pod's phase (plain pods) or the GPUJob's (kubegang). The
overhead is the one definition of ``bench/_sweep_overhead.py``: (submit to Running, summed, plus the
time from a trial's end to the submission of the trial that takes its slot) / trial GPU time. A
trial "ends" when its container exits, so the kubelet noticing that is counted as idle too.

Why a model of each system's *start path*: such a sweep loses GPU time only while a trial starts or
a slot waits for the next one, so the result is the sum of the delays on that path. Each delay is a
step the real system takes, its number from the code the operator runs or from this project's
end-to-end measurements on the real control plane (``bench/e2e/results.json``, and the end-to-end
sweep's ``bench/e2e/results-sweep.json`` for one operator write; the table of :func:`latency_sources`):

kubegang (``Operator``)
    The operator's loop (``kubegang.operator._controller``): a watch event wakes it and it runs one
    step, at once if the loop was idle for ``DEBOUNCE_SECONDS``, else that long after the last step
    ended (the operator's ``debounce_delay``): one **production** ``AdmissionCycle``
    (``KubegangPolicy.run_cycle``, the cycle the leader runs), which takes the CPU time it really
    takes here (``thread_time``: the leader runs on its own core, and the load of this shared
    machine should not enter), then the supervision pass, which writes a finished trial's GPUJob
    phase. A step that admitted something is followed by the next after the debounce; an idle loop
    steps again after ``OperatorSettings.resync_seconds``. Each admitted gang waits for one of
    ``creation_concurrency`` creation slots and makes its writes in turn (status Admitted, then its
    pods at once: ``_admission._confirm_and_create``), each behind the client's token bucket
    (``api_qps`` / ``api_burst``). kube-scheduler then binds the pod (its per-pod time plus the
    extender's verbs).
plain kube-scheduler pods (``PlainPods``)
    No queue, no gang (``DefaultSchedulerModel`` places the pods). kube-scheduler v1.36 moves pending
    pods on a pod-terminated event (QueueingHints, default on since 1.32) and pops from its backoff
    queue when the active queue is empty (``SchedulerPopFromBackoffQ``, default on since 1.33), so a
    new pod or a freed GPU is acted on at once: pods are bound one at a time at its per-pod time,
    then asynchronously written. Failed attempts of other pending pods are left out (with N in
    flight there are few).
Both
    The same kubelet: a trial's end is seen after the PLEG relist (kubelet's
    ``genericPlegRelistPeriod``, 1 s; uniform within it, the same draw for a trial on both sides), and
    a bound pod starts after ``kubelet_start_s`` (0 in the scheduling figure; the pod-startup SLO's
    5 s in the "with kubelet start" figure). The driver's create request takes one API write.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._sweep_overhead import TrialTimes, overhead
from kubegang.operator._controller import DEBOUNCE_SECONDS, debounce_delay
from kubegang.operator._settings import OperatorSettings
from kubegang.placement import Allocation, Snapshot

from ._baselines import DefaultSchedulerModel
from ._cluster import Cluster
from ._engine import Policy, Step, Wrapped, simulate
from ._kubegang import KubegangPolicy
from ._workload import Job

E2E_RESULTS = Path(__file__).resolve().parents[1] / "e2e" / "results.json"
"""The end-to-end run on the real control plane whose measured latencies the model uses."""
SWEEP_RESULTS = Path(__file__).resolve().parents[1] / "e2e" / "results-sweep.json"
"""The end-to-end sweep (``python -m bench.e2e.sweep``): its trials' Admitted-to-pod-created times are
the operator's write as this model makes it, one job at a time. (The burst's first job alone, the
source before, is one sample of two watch streams' order: in a full-size run of the 31st session its
pod's event came 9 ms *before* its Admitted one, a write of 0 ms.)"""
WRITE_STEP = "Admitted → pod created"
"""The end-to-end sweep's step whose median is one operator write (``steps_ms``)."""
TRIALS = 500
TRIAL_SECONDS = 300.0
TRIAL_JITTER = 0.1
"""Trial run times are uniform in 5 min +- 10%: trials of one sweep differ in speed, and identical
run times would end every wave in the same instant, a burst no real sweep has."""
SUBMIT_AT = 120.0
"""The sweep is submitted two minutes after the gangs, when every gang runs on both sides."""
GANG_SECONDS = 86_400.0
"""Gangs run for a day: they hold their GPUs for the whole sweep."""
GANG_FILL = (0.80, 0.90)
"""Share of the cluster's nodes the gangs hold, uniform per seed: the sweep gets 10-20% of it."""
GANG_NODES = (2, 4, 8, 16)
"""Gang sizes in 8-GPU nodes."""
PLEG_RELIST_S = 1.0
"""kubelet's generic PLEG relist period (``genericPlegRelistPeriod`` in pkg/kubelet/kubelet.go): a
container that exited is noticed at the next relist."""
POD_STARTUP_SLO_S = 5.0
"""Kubernetes' pod startup SLO (sig-scalability, ``slos/pod_startup_latency.md``): 99th percentile
at most 5 s from creation to Running for a stateless pod whose image is present. Used as the bound
pod's kubelet start in the "with kubelet start" figure, the same for both systems."""


@dataclasses.dataclass(frozen=True)
class Latencies:
    """Every delay of the model; :func:`latency_sources` says where each value comes from."""

    debounce_s: float
    resync_s: float
    api_qps: float
    api_burst: int
    creation_concurrency: int
    api_write_s: float
    scheduler_pod_s: float
    bind_s: float
    extender_pod_s: float
    kubelet_start_s: float = 0.0
    pleg_relist_s: float = PLEG_RELIST_S


def _e2e(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        data["kubegang"]["jobs_admitted"]["first_s"], data["plain"]["pods_bound"]["p50_s"]
        data["summary"]["extender_scheduler_verbs_ms_per_pod"]
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: the end-to-end results (python -m bench.e2e.run) are needed for the sweep's "
                         f"measured latencies; missing or unreadable: {exc!r}") from exc
    return data


def _write_s(path: Path) -> float:
    """One operator API write: the end-to-end sweep's median Admitted-to-pod-created time, in seconds."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        median_ms = float(data["kubegang"]["steps_ms"][WRITE_STEP]["p50"])
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: the end-to-end sweep's results (python -m bench.e2e.sweep) are needed for the "
                         f"operator's write time; missing or unreadable: {exc!r}") from exc
    if not median_ms > 0:
        raise ValueError(f"{path}: the end-to-end sweep's {WRITE_STEP!r} median is {median_ms} ms; a write takes "
                         "time, so the run is not usable")
    return median_ms / 1000.0


def latencies(kubelet_start_s: float = 0.0, e2e_results: Path = E2E_RESULTS,
              sweep_results: Path = SWEEP_RESULTS) -> Latencies:
    """The model's delays: the operator's own settings, and the rest measured end to end."""
    e2e = _e2e(e2e_results)
    settings = OperatorSettings(extender_address="unused:0")
    plain = e2e["plain"]
    per_pod = 1.0 / plain["pods_bound"]["steady_per_s"]
    create_to_bind = plain["pods_bound"]["p50_s"] - plain["pods_created"]["p50_s"]
    return Latencies(
        debounce_s=DEBOUNCE_SECONDS,
        resync_s=settings.resync_seconds,
        api_qps=settings.api_qps,
        api_burst=settings.api_burst,
        creation_concurrency=settings.creation_concurrency,
        api_write_s=_write_s(sweep_results),
        scheduler_pod_s=per_pod,
        bind_s=max(0.0, create_to_bind - per_pod),
        extender_pod_s=e2e["summary"]["extender_scheduler_verbs_ms_per_pod"] / 1000.0,
        kubelet_start_s=kubelet_start_s,
    )


def latency_sources(lat: Latencies) -> list[tuple[str, str, str]]:
    """(delay, value, where it comes from) for the page."""
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.1f} ms"

    return [
        ("operator debounce: least time from one step's end to the next step", ms(lat.debounce_s),
         "`kubegang.operator._controller.DEBOUNCE_SECONDS` and `debounce_delay` (imported)"),
        ("operator loop when nothing happens", f"{lat.resync_s:g} s", "`OperatorSettings.resync_seconds` (imported)"),
        ("one admission cycle", "measured", "CPU time of the production `AdmissionCycle` in this run"),
        ("gangs in creation at once", str(lat.creation_concurrency), "`OperatorSettings.creation_concurrency`"),
        ("operator API rate limit", f"{lat.api_qps:g}/s, burst {lat.api_burst}",
         "`OperatorSettings.api_qps` / `api_burst`"),
        ("one operator API write", ms(lat.api_write_s),
         "e2e sweep: a trial's Admitted to its pod created, median over its trials (`bench/e2e/results-sweep.json`)"),
        ("kube-scheduler time per pod", ms(lat.scheduler_pod_s),
         "e2e: 1 / plain pods bound per s, steady (an upper bound: pod creation was the limit)"),
        ("binding and watch after scheduling", ms(lat.bind_s),
         "e2e: plain pods' median created-to-bound, less the per-pod time"),
        ("extender verbs per kubegang pod", ms(lat.extender_pod_s), "e2e: the extender's filter time per pod"),
        ("kubelet: trial end noticed", f"uniform 0-{lat.pleg_relist_s:g} s",
         "kubelet's PLEG relist period (both systems)"),
        ("kubelet: bound pod to Running", "0 s, or 5 s", "0 for the scheduling figure; the pod-startup SLO's "
         "p99 for the 'with kubelet start' figure (both systems)"),
    ]


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """One seed's sweep: the gangs, the trials and the per-trial kubelet draw both systems share."""

    jobs: tuple[Job, ...]
    trials: tuple[str, ...]
    noticed_after: dict[str, float]
    """Trial id -> seconds after its end until kubelet reports it (PLEG relist phase)."""
    sweep_gpus: int
    """GPUs the gangs leave free: the trials the driver keeps in flight."""


def build_sweep(cluster: Cluster, seed: int, trials: int = TRIALS, lat_relist: float = PLEG_RELIST_S) -> SweepSpec:
    """Gangs of 8-GPU pods filling a seeded 80-90% of the nodes, then ``trials`` one-GPU trials that
    the driver releases ``sweep_gpus`` at a time from ``SUBMIT_AT``."""
    rng = random.Random(seed)
    nodes = cluster.topology.node_count
    per_node = cluster.gpus // nodes
    target = int(nodes * rng.uniform(*GANG_FILL))
    jobs: list[Job] = []
    held = 0
    while held < target:
        size = min(rng.choice(GANG_NODES), target - held)
        jobs.append(Job(f"gang-{len(jobs)}", 0.0, size, per_node, GANG_SECONDS, time_limit=GANG_SECONDS))
        held += size
    ids = []
    noticed = {}
    for i in range(trials):
        duration = TRIAL_SECONDS * rng.uniform(1 - TRIAL_JITTER, 1 + TRIAL_JITTER)
        trial = Job(f"trial-{i:03d}", SUBMIT_AT, 1, 1, duration, time_limit=2 * TRIAL_SECONDS)
        jobs.append(trial)
        ids.append(trial.id)
        noticed[trial.id] = rng.uniform(0.0, lat_relist)
    return SweepSpec(tuple(jobs), tuple(ids), noticed, cluster.gpus - held * per_node)


class _TokenBucket:
    """A client-side rate limiter in simulated time (client-go's token bucket: ``qps``, ``burst``)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self.tokens, self.at = float(burst), 0.0

    def take(self, now: float) -> float:
        """When a write asked for at ``now`` may go."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return now
        wait = (1.0 - self.tokens) / self.qps
        self.tokens, self.at = 0.0, now + wait
        return now + wait


class _StartPath(Wrapped):
    """What both systems share: the sweep driver (``N`` trials in flight, the next one created when
    it learns one is over), trials reported Running when their start path says, and a finished
    trial's GPU held until the kubelet reports the end. Subclasses say when pods bind and when the
    driver learns that a trial ended."""

    def __init__(self, inner: Policy, spec: SweepSpec, lat: Latencies) -> None:
        super().__init__(inner)
        self.spec, self.lat = spec, lat

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        super().reset(cluster, snapshot, rng)
        self.running_at: dict[str, float] = {}
        """Job id -> when its pods run (admitted or bound, not reported started yet)."""
        self.noticed: dict[str, tuple[float, Job]] = {}
        """Placeholder owner -> (when kubelet reports the trial's end, the trial)."""
        self.allocations: dict[str, tuple[Allocation, ...]] = {}
        self.scheduler_free = 0.0
        self.jobs: dict[str, Job] = {}
        self.trial_ids = set(self.spec.trials)
        self.backlog: list[Job] = []
        """Trials the driver has not created yet, in order."""
        self.in_flight = 0
        self.visible: dict[str, float] = {}
        """Trial id -> when its object exists (the driver's create request done)."""
        self.learn_at: dict[str, float] = {}
        """Trial id -> when the driver learns it is over."""
        self.submitted: dict[str, float] = {}
        self.slot_freed: dict[str, float] = {}
        self.ended: dict[str, float] = {}

    def submit(self, job: Job, now: float) -> None:
        self.jobs[job.id] = job
        if job.id not in self.trial_ids:
            self.arrive(job, now)
            return
        self.backlog.append(job)
        while self.backlog and self.in_flight < self.spec.sweep_gpus:
            self._create(now, None)

    def _create(self, now: float, freed_by: str | None) -> None:
        """The driver sends the next trial's create request at ``now``."""
        job = self.backlog.pop(0)
        self.in_flight += 1
        self.submitted[job.id] = now
        if freed_by is not None:
            self.slot_freed[job.id] = self.ended[freed_by]
        self.visible[job.id] = now + self.lat.api_write_s

    def arrive(self, job: Job, now: float) -> None:
        """The job's object exists: the scheduler's (or operator's) watch sees it."""
        self.inner.submit(job, now)

    def learned(self, job_id: str, now: float) -> None:
        """The driver learns trial ``job_id`` is over, and creates the next one."""
        self.in_flight -= 1
        if self.backlog:
            self._create(now, job_id)

    def bind(self, job_ids: Sequence[str], created: float) -> None:
        """kube-scheduler binds the pods of these jobs, created at ``created``, one pod at a time; a job
        runs once its last pod is bound and started."""
        for job_id in job_ids:
            pods = self.jobs[job_id].pods
            start = max(created, self.scheduler_free) + pods * (self.lat.scheduler_pod_s + self.extender_s)
            self.scheduler_free = start
            self.running_at[job_id] = start + self.lat.bind_s + self.lat.kubelet_start_s

    extender_s = 0.0

    def finished(self, job: Job, now: float) -> None:
        held = self.allocations.pop(job.id, ())
        if job.id in self.trial_ids and held:
            self.ended[job.id] = now
            owner = f"{job.id}/ended"
            self.snapshot.allocate_all([dataclasses.replace(a, owner=owner) for a in held])
            self.noticed[owner] = (now + self.spec.noticed_after[job.id], job)
        else:
            self.seen_ended(job, now)

    def seen_ended(self, job: Job, now: float) -> None:
        """The kubelet reported the end: the schedulers' watches see the GPU free."""
        self.inner.finished(job, now)

    def _due(self, now: float) -> None:
        """Every internal event up to ``now``, in time order."""
        while True:
            events = [(when, 0, owner) for owner, (when, _) in self.noticed.items()]
            events += [(when, 1, job_id) for job_id, when in self.learn_at.items()]
            events += [(when, 2, job_id) for job_id, when in self.visible.items()]
            due = min((e for e in events if e[0] <= now), default=None)
            if due is None:
                return
            when, kind, key = due
            if kind == 0:
                _, job = self.noticed.pop(key)
                self.snapshot.release(key)
                self.seen_ended(job, when)
            elif kind == 1:
                del self.learn_at[key]
                self.learned(key, when)
            else:
                del self.visible[key]
                self.arrive(self.jobs[key], when)

    def _started(self, now: float) -> Step:
        step = Step()
        for job_id, when in sorted(self.running_at.items(), key=lambda kv: kv[1]):
            if when <= now:
                del self.running_at[job_id]
                self.allocations[job_id] = self.snapshot.allocations_of(job_id)
                step.started.append(job_id)
        return step

    def timers(self) -> list[float]:
        return [*self.running_at.values(), *(when for when, _ in self.noticed.values()),
                *self.learn_at.values(), *self.visible.values()]

    def next_timer(self) -> float | None:
        return min(self.timers(), default=None)

    def trial_times(self, started: dict[str, float]) -> list[TrialTimes]:
        return [TrialTimes(self.submitted[t], started[t], self.ended[t], self.slot_freed.get(t))
                for t in self.spec.trials]


class PlainPods(_StartPath):
    """Plain kube-scheduler pods: ``DefaultSchedulerModel`` placement, kube-scheduler's start path;
    the driver learns a trial's end from the pod's phase, which the kubelet's report sets."""

    name = "plain kube-scheduler"

    def __init__(self, spec: SweepSpec, lat: Latencies) -> None:
        super().__init__(DefaultSchedulerModel(timeout=None), spec, lat)
        self.name = PlainPods.name

    def seen_ended(self, job: Job, now: float) -> None:
        super().seen_ended(job, now)
        if job.id in self.trial_ids:
            self.learn_at[job.id] = now

    def schedule(self, now: float) -> Step:
        self._due(now)
        placed = self.inner.schedule(now)
        self.bind(placed.started, now)
        return self._started(now)


class Operator(_StartPath):
    """kubegang: the production admission cycle, run when the operator's loop would run it; the
    driver learns a trial's end from the GPUJob's phase, which the operator writes in the loop step
    after it saw the pod end (its supervision pass follows the step's admission cycle)."""

    name = "kubegang"

    def __init__(self, spec: SweepSpec, lat: Latencies) -> None:
        self.policy = KubegangPolicy()
        super().__init__(self.policy, spec, lat)
        self.extender_s = lat.extender_pod_s

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        super().reset(cluster, snapshot, rng)
        self.next_cycle: float | None = None
        self.busy_until = -math.inf
        """When the last cycle ended, or the one that runs now ends (an event before that is seen a
        debounce after it); never stepped yet: the loop is idle."""
        self.writes = _TokenBucket(self.lat.api_qps, self.lat.api_burst)
        self.slots = [0.0] * self.lat.creation_concurrency
        self.cycle_seconds: list[float] = []
        self.to_report: list[str] = []
        """Trials whose end the operator saw and has not written to their GPUJob yet."""

    def _wake(self, now: float) -> None:
        """A watch event: the loop runs a step at once if it has been idle for the debounce, else the
        rest of the debounce after the last step ended (the operator's own ``debounce_delay``)."""
        at = now + debounce_delay(now - self.busy_until, self.lat.debounce_s)
        if self.next_cycle is None or self.next_cycle > at:
            self.next_cycle = at

    def arrive(self, job: Job, now: float) -> None:
        super().arrive(job, now)
        self._wake(now)

    def seen_ended(self, job: Job, now: float) -> None:
        super().seen_ended(job, now)
        if job.id in self.trial_ids:
            self.to_report.append(job.id)
        self._wake(now)

    def _create_gang(self, job_id: str, admitted: float) -> None:
        """The gang's creation task: a free slot, its status write, then all its pods at once (each
        write behind the token bucket), then kube-scheduler."""
        slot = min(range(len(self.slots)), key=self.slots.__getitem__)
        at = self.writes.take(max(admitted, self.slots[slot])) + self.lat.api_write_s
        at = max(self.writes.take(at) for _ in range(self.jobs[job_id].pods)) + self.lat.api_write_s
        self.slots[slot] = at
        self.bind([job_id], at)

    def schedule(self, now: float) -> Step:
        self._due(now)
        while self.next_cycle is not None and self.next_cycle <= now:
            began = self.next_cycle
            cpu = time.thread_time()
            admitted, changed = self.policy.run_cycle(began)
            took = time.thread_time() - cpu
            self.cycle_seconds.append(took)
            ended = began + took
            self.busy_until = ended
            for job_id in admitted.started:
                self._create_gang(job_id, ended)
            for job_id in self.to_report:  # the step's supervision pass: GPUJob status Succeeded
                self.learn_at[job_id] = self.writes.take(ended) + self.lat.api_write_s
            self.to_report.clear()
            if changed:  # an admission changes the cache, which wakes the loop
                self.next_cycle = ended + debounce_delay(0.0, self.lat.debounce_s)
            elif self.policy.waiting():
                self.next_cycle = ended + self.lat.resync_s + debounce_delay(self.lat.resync_s, self.lat.debounce_s)
            else:
                self.next_cycle = None
            self._due(now)
        return self._started(now)

    def timers(self) -> list[float]:
        return [*super().timers(), *([self.next_cycle] if self.next_cycle is not None else [])]


SYSTEMS = ("kubegang", PlainPods.name)


def run_one(cluster: Cluster, seed: int, system: str, lat: Latencies, trials: int = TRIALS) -> dict[str, Any]:
    """One seed, one system: the overhead figures, and for kubegang its cycle times."""
    spec = build_sweep(cluster, seed, trials, lat.pleg_relist_s)
    policy: Operator | PlainPods = Operator(spec, lat) if system == "kubegang" else PlainPods(spec, lat)
    result = simulate(policy, cluster, spec.jobs, seed=seed, horizon=SUBMIT_AT + 20 * TRIAL_SECONDS * trials)
    gangs = [j.id for j in spec.jobs if j.id.startswith("gang-")]
    late = [g for g in gangs if result.started.get(g, SUBMIT_AT + 1) > SUBMIT_AT]
    if late:
        raise RuntimeError(f"{system} seed {seed}: gangs {late[:3]} did not start before the sweep")
    missing = [t for t in spec.trials if t not in result.finished]
    if missing:
        raise RuntimeError(f"{system} seed {seed}: {len(missing)} trials did not finish (first {missing[0]})")
    times = policy.trial_times(result.started)
    cost = overhead(times)
    first = [t.running - t.submitted for t in times if t.slot_freed is None]
    later = [t for t in times if t.slot_freed is not None]
    out = {"seed": seed, "system": system, "sweep_gpus": spec.sweep_gpus,
           "overhead_pct": 100.0 * cost.ratio, "lost_gpu_s": cost.lost_gpu_seconds,
           "trial_gpu_s": cost.trial_gpu_seconds, "start_latency_gpu_s": cost.start_latency_gpu_seconds,
           "idle_gpu_s": cost.idle_gpu_seconds,
           "first_wave_start_s": statistics.fmean(first),
           "slot_gap_s": statistics.fmean(t.running - t.slot_freed for t in later if t.slot_freed is not None)
           if later else float("nan"),
           "makespan_s": max(t.finished for t in times) - SUBMIT_AT}
    if isinstance(policy, Operator):
        cycles = sorted(policy.cycle_seconds)
        out |= {"cycles": len(cycles), "cycle_p50_ms": 1000 * cycles[len(cycles) // 2],
                "cycle_max_ms": 1000 * cycles[-1]}
    return out
