"""The discrete-event loop: a virtual clock, an event heap and one cycle per busy instant.

Owns applying a policy's decisions to the simulated cluster: admissions hold devices and end
after the job's run time (startup is instantaneous; an elastic job started below its maximum
takes longer, its work being device-seconds), preemption victims are evicted whole after
a grace period and requeued with their original submission time, and a gang whose last replica
does not start within its startup timeout is torn down whole. An elastic gang may be grown at
once or shrunk after a grace period (rule 13): it re-forms at its new size from its last
checkpoint, never requeued. It checks rule 1 (no device held twice) and rule 3 (quota) on every
admission and grow. It never decides who runs: the policy does.
"""

from __future__ import annotations

import enum
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

from gangq.queue.core import elastic, prediction, sharing
from gangq.queue.core.device import CounterSetId, Device, DeviceId
from gangq.queue.core.errors import GangqError
from gangq.queue.core.model import (
    DEFAULT_TIERS,
    Admission,
    CycleResult,
    Grow,
    JobKey,
    PendingJob,
    ReplicaPlacement,
    ServingStart,
    Snapshot,
    Victim,
)
from gangq.queue.sim import checkpoint, cluster, stall, view
from gangq.queue.sim.outcome import JobRecord, Outcome, Timeline
from gangq.queue.sim.policy import SimPolicy
from gangq.queue.sim.trace import Trace, TraceJob

SLIP_TOLERANCE_S = 60.0
"""A reservation moving later by less than this is not counted as a slip."""
EVICTION_GRACE_S = 30.0
"""Kubernetes' default termination grace period: a victim holds its devices (marked evicting,
which the core counts as coming free for its preemptor) until its pods are gone; then the gang
rejoins the queue (a shrunk one re-forms with the replicas it keeps)."""

GROW_CAUSE = "grow"
"""`Outcome.lost_by_cause`'s key for the work and restart a gang's grow costs it."""

CHECKPOINT_SAVE_S = 60.0
"""How long a job that checkpoints takes to save and report one when asked before an eviction
(rule 6, `checkpointGraceSeconds`): it answers after this or at the end of its grace, the
sooner; a job that never checkpoints does not answer and is evicted when its grace ends."""

ProgressCallback = Callable[[float], None]


class SimulationError(GangqError):
    """A policy broke a rule the simulator checks (a device held twice, a quota exceeded)."""


class EventKind(enum.IntEnum):
    """Events at the same instant run in this order: free devices first, then arrivals."""

    FINISH = 0
    TEARDOWN = 1
    EVICTED = 2
    SHRUNK = 3
    ARRIVAL = 4
    WAKE = 5


@dataclass(frozen=True, slots=True, order=True)
class Event:
    time: float
    kind: EventKind
    key: JobKey
    attempt: int = 0


class Simulation:
    """One policy over one trace; `run` consumes it."""

    def __init__(self, trace: Trace, policy: SimPolicy) -> None:
        self.trace = trace
        self.policy = policy
        self.inventory = cluster.build_inventory(trace.cluster)
        self.records = {job.key: JobRecord(job=job) for job in trace.jobs}
        self.waiting: dict[JobKey, JobRecord] = {}
        self.holding: dict[JobKey, JobRecord] = {}
        self.holder: dict[DeviceId, JobKey] = {}
        self.free_since: dict[DeviceId, float] = {}
        """When each device last came free, as the store's released reservations tell it."""
        self.serving_starts: list[ServingStart] = []
        """Admissions of the policy's `serving_tiers`, as the store's reservations tell them."""
        self.limits = {
            q.tenant: (q.nominal + q.borrowing_limit) * sharing.WHOLE for q in trace.quotas
        }
        self.tenant_use: dict[str, sharing.Equivalent] = {}
        """GPU-equivalents in thousandths, as the quota ledger counts them (rule 3)."""
        self.consumers: dict[CounterSetId, list[Device]] = {}
        for device in self.inventory.devices.values():
            for set_id, _ in device.consumes:
                self.consumers.setdefault(set_id, []).append(device)
        self.events: list[Event] = [
            Event(j.arrival_s, EventKind.ARRIVAL, j.key) for j in trace.jobs
        ]
        heapq.heapify(self.events)
        self.wakes: set[float] = set()
        self.outcome = Outcome(
            policy=policy.name,
            trace=trace,
            records={},
            timeline=Timeline(
                allocated_by_tier={t.name: [] for t in DEFAULT_TIERS},
                held_by_tenant={tenant: [] for tenant in trace.tenants},
                wanted_by_tenant={tenant: [] for tenant in trace.tenants},
            ),
        )
        self._was_blocked = False
        self._now = 0.0
        self.predictor = prediction.RuntimePredictor()
        """Fed with every run that ends by itself, as the store feeds the controller's."""
        self._learned = 0
        """Runs the predictor has been fed: a job's prediction holds until the next one."""
        self._shapes: dict[JobKey, prediction.RunShape] = {}
        self._predictions: dict[JobKey, tuple[int, float | None]] = {}
        self._views: dict[JobKey, tuple[tuple[float | None, ...], PendingJob]] = {}
        """Each waiting job's view with what it was built from: a queue of thousands is shown
        to the policy twice a cycle, and most of it is unchanged since the last."""

    def run(self, *, on_progress: ProgressCallback | None = None) -> Outcome:
        started = time.perf_counter()
        horizon = self.trace.horizon_s
        self._sample(0.0)
        next_report = 0.0
        while self.events and self.events[0].time <= horizon:
            now = self._now = self.events[0].time
            changed = False
            while self.events and self.events[0].time == now:
                changed = self._handle(heapq.heappop(self.events)) or changed
            if changed:
                self._cycle(now)
            self._sample(now)
            if on_progress is not None and now >= next_report:
                on_progress(now / horizon)
                next_report = now + horizon / 200
        self._close(horizon)
        if on_progress is not None:
            on_progress(1.0)
        self.outcome.records = dict(self.records)
        self.outcome.wall_s = time.perf_counter() - started
        return self.outcome

    def _handle(self, event: Event) -> bool:
        """Apply one event; True when a cycle may decide something new: the cluster or the
        queue changed, or a wake a cycle asked for came (a reclaim or a grow that pays
        now)."""
        if event.kind is EventKind.WAKE:
            self.wakes.discard(event.time)
            return True
        record = self.records[event.key]
        if event.kind is EventKind.ARRIVAL:
            record.pending_since = event.time
            self.waiting[record.job.key] = record
            return True
        if record.attempt != event.attempt:
            return False
        if event.kind is EventKind.EVICTED and record.evicting_since is not None:
            self._end_eviction(record, now=event.time)
            return True
        if event.kind is EventKind.SHRUNK and record.shrinking_to is not None:
            self._end_shrink(record, keep=record.shrinking_to, now=event.time)
            return True
        if event.kind is EventKind.FINISH and record.started_at is not None:
            self._lose(record.held_devices * record.restart_s, cause=record.restarted_for)
            self._learn(record, now=event.time)
            self._release(record)
            record.finished_at = event.time
            return True
        if event.kind is EventKind.TEARDOWN and record.is_partial:
            self._release(record)
            record.attempt += 1
            self.outcome.gang_start_failures += 1
            record.teardowns += 1
            return True
        return False

    def _cycle(self, now: float) -> None:
        snapshot = self._snapshot()
        if not snapshot.pending and not snapshot.growable:
            return
        result = self.policy.decide(snapshot, now=now)
        self.outcome.cycles += 1
        for key, reason in result.pending.items():
            self.records[key].wait_for(reason.cause or reason.code, now=now)
        for admission in result.admissions:
            self._admit(admission, now=now)
        for grow in result.grows:
            self._grow(grow, now=now)
        self._note_reservations(result, now=now)
        self._evict_victims(result, now=now)
        self._after_cycle(self._snapshot(), now=now, decide_again_at=result.decide_again_at)

    def _after_cycle(
        self, snapshot: Snapshot, *, now: float, decide_again_at: float | None
    ) -> None:
        for wake in (self.policy.wake_at(snapshot, now=now), decide_again_at):
            if wake is not None and wake > now and wake not in self.wakes:
                self.wakes.add(wake)
                heapq.heappush(self.events, Event(wake, EventKind.WAKE, JobKey("")))
        partial = [record for record in self.holding.values() if record.is_partial]
        blocked = stall.is_mutual_block(partial, free=self._free_per_node())
        if blocked and not self._was_blocked:
            self.outcome.deadlocks += 1
        self._was_blocked = blocked

    def _free_per_node(self) -> dict[str, int]:
        free: dict[str, int] = {name: 0 for name in self.inventory.nodes}
        for device_id, device in self.inventory.devices.items():
            if device.node is not None and device_id not in self.holder:
                free[device.node] += 1
        return free

    def _admit(self, admission: Admission, *, now: float) -> None:
        record = self.waiting.get(admission.job)
        if record is None:
            raise SimulationError(f"{admission.job}: admitted but not waiting")
        job = record.job
        if record.size is None:
            record.size = self._size_of(record, admission)
        for replica in admission.placement:
            if replica.replica in record.placement or not 0 <= replica.replica < job.replicas:
                raise SimulationError(f"{job.key}: replica {replica.replica} is placed or unknown")
        self._take(record, admission.placement, borrowed=admission.borrowed)
        if job.tier in self.policy.serving_tiers:
            self.serving_starts.append(
                ServingStart(
                    job.tenant,
                    self.trace.cluster.device_class,
                    len(admission.placement),
                    job.devices_per_replica,
                    now,
                )
            )
        newly_holding = record.held_since is None
        if newly_holding:
            record.held_since = now
            self.holding[job.key] = record
        if record.is_partial and newly_holding:
            record.was_partial = True
            deadline = now + job.startup_timeout_s
            heapq.heappush(
                self.events, Event(deadline, EventKind.TEARDOWN, job.key, record.attempt)
            )
        if len(record.placement) == record.size:
            self._start(record, now=now)

    def _take(
        self, record: JobRecord, placement: tuple[ReplicaPlacement, ...], *, borrowed: int
    ) -> None:
        """Give the job these replicas' devices, within its tenant's quota (rules 1 and 3)."""
        job = record.job
        for replica in placement:
            for device in replica.devices:
                self._hold(device, job=job.key, node=replica.node)
            record.placement[replica.replica] = replica
        count = sharing.placement_equivalent(
            placement, self.inventory.devices, self.inventory.counters
        )
        use = self.tenant_use.get(job.tenant, 0) + count
        if use > self.limits.get(job.tenant, 0):
            shown = sharing.format_equivalent(use)
            raise SimulationError(f"rule 3: tenant {job.tenant} would use {shown} GPUs")
        self.tenant_use[job.tenant] = use
        record.held_gpus += float(count) / sharing.WHOLE
        if self._overcommits(placement):
            self.outcome.counter_overcommits += 1
        record.borrowed += borrowed

    def _give_back(self, record: JobRecord, replicas: list[int]) -> None:
        """Free these replicas' devices; a gang returns its borrowed devices first."""
        placement = [record.placement.pop(replica) for replica in replicas]
        for replica in placement:
            for device in replica.devices:
                del self.holder[device]
                self.free_since[device] = self._now
        tenant = record.job.tenant
        held = sharing.placement_equivalent(
            placement, self.inventory.devices, self.inventory.counters
        )
        self.tenant_use[tenant] = self.tenant_use.get(tenant, 0) - held
        record.held_gpus -= float(held) / sharing.WHOLE
        record.borrowed -= min(record.borrowed, sum(len(p.devices) for p in placement))

    def _size_of(self, record: JobRecord, admission: Admission) -> int:
        """The size an attempt runs at: a whole-gang policy's first admission is the gang it
        chose (rule 13: an elastic job's between its minimum and `replicas`); replicas
        placed one by one run once all of the job's are."""
        job = record.job
        if not self.policy.whole_gangs:
            return job.replicas
        size = len(admission.placement)
        if not job.least_replicas <= size <= job.replicas:
            raise SimulationError(
                f"{job.key}: admitted {size} replicas, it runs at {job.least_replicas} to "
                f"{job.replicas}"
            )
        return size

    def _overcommits(self, placement: tuple[ReplicaPlacement, ...]) -> bool:
        """Rule 12, counted by brute force: some counter set a newly held device consumes is
        over-committed by all the devices held now."""
        devices = self.inventory.devices
        touched = {
            set_id
            for replica in placement
            for device in replica.devices
            for set_id, _ in devices[device].consumes
        }
        for set_id in touched:
            used: dict[str, int] = {}
            for device in self.consumers[set_id]:
                if device.id in self.holder:
                    for amounts_set, amounts in device.consumes:
                        if amounts_set == set_id:
                            for name, amount in amounts.items():
                                used[name] = used.get(name, 0) + amount
            limits = self.inventory.counters.get(set_id, {})
            if any(amount > limits.get(name, 0) for name, amount in used.items()):
                return True
        return False

    def _hold(self, device: DeviceId, *, job: JobKey, node: str) -> None:
        known = self.inventory.devices.get(device)
        if known is None or known.node != node:
            raise SimulationError(f"{job}: device {device} is not on node {node}")
        if device in self.holder:
            raise SimulationError(
                f"rule 1: {device} given to {job} while {self.holder[device]} holds it"
            )
        self.holder[device] = job

    def _start(self, record: JobRecord, *, now: float) -> None:
        record.started_at = now
        if record.first_started_at is None:
            record.first_started_at = now
        if record.pending_since is not None:
            record.waited_s += now - record.pending_since
            record.pending_since = None
        record.wait_for(None, now=now)
        self.waiting.pop(record.job.key, None)
        job = record.job
        if job.max_runtime_s is not None:
            # the bound is on wall time: a smaller size does not get longer
            record.ends_by = now + record.restart_s + job.max_runtime_s
        self._run(record, now=now)

    def _run(self, record: JobRecord, *, now: float) -> None:
        """Plan the run from `now` at the gang's size: its restart, then the rest of its work,
        stopped at its bound."""
        job = record.job
        predicted = self._predict(job)
        if record.predicted_run_s is None:
            record.predicted_run_s = predicted
        record.predicted_end = None
        if predicted is not None:
            rest = self._at_size(record, max(predicted - record.progress_s, 0.0))
            record.predicted_end = now + record.restart_s + rest
        run_s = job.run_s
        if run_s is not None:
            end = now + record.restart_s + self._at_size(record, max(run_s - record.progress_s, 0))
            if record.ends_by is not None:
                end = min(end, record.ends_by)
            heapq.heappush(self.events, Event(end, EventKind.FINISH, job.key, record.attempt))

    @staticmethod
    def _at_size(record: JobRecord, work_s: float) -> float:
        """How long `work_s` of the job's run (at its `replicas`) takes at the attempt's size."""
        size = record.size or record.job.replicas
        return elastic.runtime_at(work_s, size=size, replicas=record.job.replicas)

    def _learn(self, record: JobRecord, *, now: float) -> None:
        """A run that ended by itself teaches the predictor (one code path with the store)."""
        job = record.job
        run_s = job.run_s
        if run_s is None:
            return
        self.predictor.record(
            prediction.FinishedRun(shape=self._shape_of(job), runtime_s=run_s, ended_at=now)
        )
        self._learned += 1
        if record.predicted_run_s is not None:
            self.outcome.predictions.append((record.predicted_run_s, run_s))

    def _release(self, record: JobRecord) -> None:
        self._give_back(record, list(record.placement))
        record.held_gpus = 0.0
        record.size = None
        record.held_since = None
        record.started_at = record.ends_by = record.shrinking_to = None
        record.evicting_since = record.evicting_by = record.saved_on_request_at = None
        del self.holding[record.job.key]

    def _evict_victims(self, result: CycleResult, *, now: float) -> None:
        """Rule 6: whole gangs go, after their grace period; one that opted in is asked for a
        checkpoint first and its pods are deleted once it answers or its grace ends. A victim
        with `keep` is shrunk alike (rule 13): only its replicas from `keep` on go. A gang
        already shrinking is not chosen again until its shrink is done, as the store leaves
        it (the core may choose the part it keeps)."""
        for preemption in result.preemptions:
            preemptor = self.records[preemption.job]
            tier = preemptor.job.tier
            for victim in preemption.victims:
                record = self.records.get(victim.job)
                if record is None or record.held_since is None or record.evicting_since is not None:
                    raise SimulationError(f"{victim.job}: chosen as a victim but not running")
                if record.shrinking_to is not None:
                    continue
                # as the store: the wait paid only for victims this preemption moves
                preemptor.preempted_at = now
                cause = f"reclaim by {tier}" if victim.reclaim else f"{tier} > {record.job.tier}"
                if victim.keep is not None:
                    self._shrink(record, victim, cause=f"{cause} (shrink)", now=now)
                    continue
                record.evicting_since = now
                record.evicting_for = cause
                record.evictions += 1
                self.outcome.evictions += 1
                self._after_grace(record, EventKind.EVICTED, now=now)

    def _after_grace(self, record: JobRecord, kind: EventKind, *, now: float) -> None:
        """Ask the victim for a checkpoint, and delete its pods once it answers or its grace
        ends: `kind` happens when they are gone."""
        asked_s = self._ask_for_checkpoint(record, now=now)
        event = Event(now + asked_s + EVICTION_GRACE_S, kind, record.job.key, record.attempt)
        heapq.heappush(self.events, event)

    def _shrink(self, record: JobRecord, victim: Victim, *, cause: str, now: float) -> None:
        """Start shrinking an elastic gang to `victim.keep` replicas (rule 13), at least its
        minimum and fewer than it runs with."""
        keep = victim.keep
        least = record.job.min_replicas
        size = record.size or record.job.replicas
        if keep is None or least is None or not least <= keep < size or record.is_partial:
            raise SimulationError(f"{victim.job}: cannot shrink to {keep} from {size}")
        record.shrinking_to = keep
        record.evicting_for = cause
        self._after_grace(record, EventKind.SHRUNK, now=now)

    def _end_shrink(self, record: JobRecord, *, keep: int, now: float) -> None:
        """The leaving pods are gone: the gang re-forms with the `keep` replicas it keeps, from
        its last checkpoint, and runs on at that size; it never rejoins the queue."""
        cause = record.evicting_for
        self._settle(record, cause=cause, now=now)
        self._give_back(record, [replica for replica in record.placement if replica >= keep])
        record.size = keep
        record.shrinks += 1
        self.outcome.shrinks += 1
        self._reform(record, cause=cause, now=now)

    def _grow(self, grow: Grow, *, now: float) -> None:
        """Add replicas to a running elastic gang at once (rule 13): it re-forms at its new size
        from its last checkpoint."""
        record = self.holding.get(grow.job)
        if (
            record is None
            or record.started_at is None
            or record.size is None
            or record.evicting_since is not None
            or record.shrinking_to is not None
        ):
            raise SimulationError(f"{grow.job}: grown but not running whole")
        added = sorted(replica.replica for replica in grow.placement)
        if added != list(range(record.size, grow.size)) or grow.size > record.job.replicas:
            raise SimulationError(f"{grow.job}: grown by replicas {added} from {record.size}")
        self._settle(record, cause=GROW_CAUSE, now=now)
        self._take(record, grow.placement, borrowed=grow.borrowed)
        record.size = grow.size
        record.grows += 1
        self.outcome.grows += 1
        self._reform(record, cause=GROW_CAUSE, now=now)

    def _reform(self, record: JobRecord, *, cause: str | None, now: float) -> None:
        """The resized gang restarts now and runs the rest of its work at its new size."""
        record.started_at = now
        record.restart_s = record.job.restart_s
        record.restarted_for = cause
        record.shrinking_to = record.evicting_for = None
        record.evicting_by = record.saved_on_request_at = None
        record.attempt += 1
        self._run(record, now=now)

    def _settle(self, record: JobRecord, *, cause: str | None, now: float) -> None:
        """The gang goes back to its last checkpoint: its saved work counts as progress, its
        restart so far is lost to why it restarted and the rest since the checkpoint to
        `cause`."""
        settled = checkpoint.settle(record, now=now)
        record.progress_s += settled.progress_s
        record.lost_device_s += settled.lost_device_s
        self._lose(settled.restarting_device_s, cause=record.restarted_for)
        self._lose(settled.lost_device_s - settled.restarting_device_s, cause=cause)

    def _lose(self, device_s: float, *, cause: str | None) -> None:
        """Count destroyed work, by the eviction or resize that destroyed it
        (`Outcome.lost_by_cause`)."""
        if device_s <= 0.0:
            return
        self.outcome.device_seconds_lost += device_s
        key = cause or "unknown"
        self.outcome.lost_by_cause[key] = self.outcome.lost_by_cause.get(key, 0.0) + device_s

    def _ask_for_checkpoint(self, record: JobRecord, *, now: float) -> float:
        """How long a victim keeps running after the request: a job that checkpoints answers
        after saving (`CHECKPOINT_SAVE_S`, at most its grace), with its work up to the request
        saved; one that does not runs out its grace and loses as if it had not been asked."""
        grace = record.job.checkpoint_grace_s
        if grace is None or record.started_at is None:
            return 0.0
        record.evicting_by = now + grace
        if record.job.checkpoint_interval_s is None:
            return grace
        record.saved_on_request_at = now
        return min(grace, CHECKPOINT_SAVE_S)

    def _end_eviction(self, record: JobRecord, *, now: float) -> None:
        """The victim's pods are gone: its work since its last checkpoint is lost and it queues
        again with its original submission time (PendingJob.submitted_at is always the
        arrival), to resume from that checkpoint."""
        self._settle(record, cause=record.evicting_for, now=now)
        record.restarted_for = record.evicting_for
        self._release(record)
        record.restart_s = record.job.restart_s
        record.attempt += 1
        if record.pending_since is None:
            record.pending_since = now
        self.waiting[record.job.key] = record

    def _note_reservations(self, result: CycleResult, *, now: float) -> None:
        """Remember each job's first promise, and every move of its reservation later, by
        cause (rule 5: an outlived prediction, else a higher-ordered job)."""
        for reservation in result.reservations:
            record = self.records.get(reservation.job)
            if record is None:
                continue
            if record.promised_start is None:
                record.promised_start = reservation.start_at
                record.promised_at = now
            before = record.reserved_start
            if before is not None and reservation.start_at > max(before, now) + SLIP_TOLERANCE_S:
                cause = "outlived" if reservation.outlived else "arrival"
                moved = reservation.start_at - max(before, now)
                self.outcome.slips.setdefault(cause, []).append(moved)
            record.reserved_start = reservation.start_at

    def _snapshot(self) -> Snapshot:
        device_class = self.trace.cluster.device_class
        now = self._now
        running = tuple(
            gang
            for record in self.holding.values()
            for gang in view.running(record, device_class=device_class, now=now)
        )
        pending = tuple(
            self._pending_view(job)
            for job in sorted(
                (r.job for r in self.waiting.values()), key=lambda j: (j.arrival_s, j.key)
            )
        )
        growable = tuple(
            view.pending(
                record.job,
                device_class=device_class,
                selectors=(*record.job.selectors, *self._profile(record.job)),
                predicted_runtime_s=self._predicted_if_grown(record, now=now),
                queued_at=None,
            )
            for record in self.holding.values()
            if view.is_growable(record)
        )
        return Snapshot(
            inventory=self.inventory,
            quotas=self.trace.quotas,
            running=running,
            pending=pending,
            growable=growable,
            serving_starts=tuple(self.serving_starts),
            free_since=dict(self.free_since),
        )

    def _pending_view(self, job: TraceJob) -> PendingJob:
        record = self.records[job.key]
        inputs = (self._predicted_left(job), record.pending_since, record.preempted_at)
        cached = self._views.get(job.key)
        if cached is not None and cached[0] == inputs:
            return cached[1]
        shown = view.pending(
            job,
            device_class=self.trace.cluster.device_class,
            selectors=(*job.selectors, *self._profile(job)),
            predicted_runtime_s=inputs[0],
            queued_at=inputs[1],
            preempted_at=inputs[2],
        )
        self._views[job.key] = (inputs, shown)
        return shown

    def _predict(self, job: TraceJob) -> float | None:
        """The predictor's answer for the job, asked again only once it has learned a run."""
        cached = self._predictions.get(job.key)
        if cached is not None and cached[0] == self._learned:
            return cached[1]
        predicted = self.predictor.predict(self._shape_of(job), max_runtime_s=job.max_runtime_s)
        self._predictions[job.key] = (self._learned, predicted)
        return predicted

    def _shape_of(self, job: TraceJob) -> prediction.RunShape:
        shape = self._shapes.get(job.key)
        if shape is None:
            shape = self._shapes[job.key] = _shape(job)
        return shape

    def _profile(self, job: TraceJob) -> tuple[str, ...]:
        """Where nodes publish partitions, whole-GPU jobs select whole GPUs and slice jobs their
        profile (the DeviceClass alone matches both)."""
        if not self.trace.cluster.partitioned_nodes:
            return ()
        return (cluster.profile_selector(job.slice or cluster.WHOLE_PROFILE),)

    def _predicted_left(self, job: TraceJob) -> float | None:
        """The predicted rest of a waiting job's run: its prediction less the work it saved,
        plus its restart if it was evicted."""
        predicted = self._predict(job)
        if predicted is None:
            return None
        record = self.records[job.key]
        return record.restart_s + max(predicted - record.progress_s, 0.0)

    def _predicted_if_grown(self, record: JobRecord, *, now: float) -> float | None:
        """The predicted rest of a running gang's run at its maximum if it grew now: its
        restart, then its prediction less the work its checkpoints hold."""
        job = record.job
        predicted = self._predict(job)
        if predicted is None:
            return None
        saved = record.progress_s + checkpoint.settle(record, now=now).progress_s
        return job.restart_s + max(predicted - saved, 0.0)

    def _sample(self, now: float) -> None:
        timeline = self.outcome.timeline
        allocated = {tier: 0.0 for tier in timeline.allocated_by_tier}
        held_by_tenant = {tenant: 0.0 for tenant in timeline.held_by_tenant}
        wanted_by_tenant = {tenant: 0 for tenant in timeline.wanted_by_tenant}
        partial_held = 0.0
        for record in self.holding.values():
            held = record.held_gpus
            allocated[record.job.tier] = allocated.get(record.job.tier, 0) + held
            held_by_tenant[record.job.tenant] = held_by_tenant.get(record.job.tenant, 0) + held
            if record.is_partial:
                partial_held += held
        wanted = 0.0
        for record in self.waiting.values():
            more = record.job.device_count - record.held_devices
            wanted += more * record.job.gpus / record.job.device_count
            tenant = record.job.tenant
            wanted_by_tenant[tenant] = wanted_by_tenant.get(tenant, 0) + more
        timeline.append(
            now,
            allocated=allocated,
            pending=len(self.waiting),
            demand=sum(allocated.values()) + wanted,
            partial_held=partial_held,
            held_by_tenant=held_by_tenant,
            wanted_by_tenant=wanted_by_tenant,
            largest_gang=self._largest_gang(),
        )

    def _largest_gang(self) -> int:
        """Devices of the largest gang of whole-node replicas placeable now."""
        devices = self.inventory.devices
        busy = {devices[device].node for device in self.holder}
        return (len(self.inventory.nodes) - len(busy)) * self.trace.cluster.devices_per_node

    def _close(self, horizon: float) -> None:
        """Jobs still waiting at the horizon count their wait so far (a lower bound), and
        jobs restarting the part of their restart spent so far."""
        for record in self.holding.values():
            if record.started_at is not None:
                spent = min(record.restart_s, horizon - record.started_at)
                self._lose(record.held_devices * spent, cause=record.restarted_for)
        for record in self.waiting.values():
            if record.pending_since is not None:
                record.waited_s += horizon - record.pending_since
                record.pending_since = None
            record.wait_for(None, now=horizon)
        self._sample(horizon)


def _shape(job: TraceJob) -> prediction.RunShape:
    family = job.family or prediction.family_of(job.key.rpartition("/")[2])
    return prediction.RunShape(
        tenant=job.tenant,
        tier=job.tier,
        replicas=job.replicas,
        devices_per_replica=job.devices_per_replica,
        family=family,
    )


def simulate(
    trace: Trace, policy: SimPolicy, *, on_progress: ProgressCallback | None = None
) -> Outcome:
    """Run `policy` over `trace` up to the trace's horizon."""
    return Simulation(trace, policy).run(on_progress=on_progress)
