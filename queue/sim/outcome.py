"""What one simulation run leaves behind: per-job records, the timeline and event counters.

Owns the raw facts only (times, device counts); `report` turns them into figures. The engine
fills these records as the virtual clock moves; nothing here decides or computes metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangq.queue.core.model import JobKey, ReplicaPlacement
from gangq.queue.sim.trace import Trace, TraceJob


@dataclass(slots=True)
class JobRecord:
    """One job's life: waits accumulate from submission (and after each eviction) to its start."""

    job: TraceJob
    placement: dict[int, ReplicaPlacement] = field(default_factory=dict)
    size: int | None = None
    """The replicas the current attempt runs at, set by its first admission: an elastic
    job's may be fewer than `job.replicas` (the core's start size)."""
    borrowed: int = 0
    held_since: float | None = None
    """When the first replica got devices (the start the core sees for running gangs)."""
    started_at: float | None = None
    """When the last replica got devices: the work runs from here."""
    evicting_since: float | None = None
    """Chosen as a preemption victim; its devices are held until the grace period ends."""
    evicting_by: float | None = None
    """A victim asked for a checkpoint first: the end of its checkpoint grace."""
    saved_on_request_at: float | None = None
    """A victim that answered the request: its work up to this instant is saved."""
    attempt: int = 0
    """Bumped on eviction or teardown so timers of an earlier attempt are ignored."""
    pending_since: float | None = None
    preempted_at: float | None = None
    """When the job, queued, last evicted or shrank gangs for itself (`PendingJob.preempted_at`)."""
    waited_s: float = 0.0
    first_started_at: float | None = None
    finished_at: float | None = None
    evictions: int = 0
    teardowns: int = 0
    was_partial: bool = False
    promised_start: float | None = None
    """First backfill reservation start the policy gave this job (rule 5)."""
    promised_at: float | None = None
    reserved_start: float | None = None
    """The latest reservation start the policy gave this job, to see it move."""
    progress_s: float = 0.0
    """Work saved in checkpoints by earlier attempts: a restart resumes from there."""
    restart_s: float = 0.0
    """How long the current attempt restarts before its work resumes: the job's restart
    after an eviction, nothing on its first start."""
    lost_device_s: float = 0.0
    """Device-seconds of work its evictions and resizes destroyed so far (the store keeps the
    same per job): the core counts them against evicting it again (rule 6)."""
    evicting_for: str | None = None
    """Why it is being evicted or shrunk now (`Outcome.lost_by_cause`'s key)."""
    restarted_for: str | None = None
    """Why its current run restarted (`Outcome.lost_by_cause`'s key): after an eviction or a
    resize, its restart is lost work of that cause too."""
    shrinking_to: int | None = None
    """Chosen as a shrink victim (rule 13): it keeps this many replicas once its leaving pods
    are gone; until then it holds all its devices, the leaving ones coming free."""
    ends_by: float | None = None
    """When the current attempt is stopped at the latest (`maxRuntimeSeconds` from its start),
    whatever resizes it goes through."""
    grows: int = 0
    shrinks: int = 0
    predicted_end: float | None = None
    """When the current attempt is predicted to end (from the runs finished before it)."""
    predicted_run_s: float | None = None
    """The whole run as predicted when the job first started (for the prediction error)."""
    held_gpus: float = 0.0
    """GPU-equivalents it holds: a partition counts its share of the GPU (rule 12)."""
    waited_by_cause: dict[str, float] = field(default_factory=dict)
    """Seconds waited per cause (explain.WaitCause), each from the cycle that gave it."""
    cause: tuple[str, float] | None = None
    """The cause the last cycle gave while the job waits, and since when."""

    def wait_for(self, cause: str | None, *, now: float) -> None:
        """Close the interval of the previous cause at `now` and open `cause` (None: the job
        stopped waiting)."""
        if self.cause is not None:
            previous, since = self.cause
            self.waited_by_cause[previous] = self.waited_by_cause.get(previous, 0.0) + now - since
        self.cause = None if cause is None else (cause, now)

    @property
    def held_devices(self) -> int:
        return sum(len(replica.devices) for replica in self.placement.values())

    @property
    def is_partial(self) -> bool:
        return 0 < len(self.placement) < (self.size or self.job.replicas)


@dataclass(slots=True)
class Timeline:
    """State after each simulated instant, as parallel columns (a step function in time)."""

    times: list[float] = field(default_factory=list)
    allocated_by_tier: dict[str, list[float]] = field(default_factory=dict)
    """GPU-equivalents held per tier (a partition counts its share of its GPU)."""
    pending_jobs: list[int] = field(default_factory=list)
    demand: list[float] = field(default_factory=list)
    """GPU-equivalents held plus those still wanted by waiting jobs."""
    partial_held: list[float] = field(default_factory=list)
    """Devices held by gangs that are not complete (idle until their last replica starts)."""
    held_by_tenant: dict[str, list[float]] = field(default_factory=dict)
    wanted_by_tenant: dict[str, list[int]] = field(default_factory=dict)
    """Devices still wanted by each tenant's waiting jobs (its demand beyond what it holds)."""
    largest_gang: list[int] = field(default_factory=list)
    """Devices of the largest gang of whole-node replicas that could be placed: the nodes no
    job holds anything on (not a GPU, not a partition) times their GPUs."""

    def append(
        self,
        time: float,
        *,
        allocated: dict[str, float],
        pending: int,
        demand: float,
        partial_held: float,
        held_by_tenant: dict[str, float],
        wanted_by_tenant: dict[str, int],
        largest_gang: int = 0,
    ) -> None:
        columns = [*self.allocated_by_tier.values(), *self.held_by_tenant.values()]
        if self.times and self.times[-1] == time:
            self.times.pop()
            for column in columns:
                column.pop()
            for wanted_column in self.wanted_by_tenant.values():
                wanted_column.pop()
            self.pending_jobs.pop()
            self.demand.pop()
            self.partial_held.pop()
            self.largest_gang.pop()
        self.times.append(time)
        for values, table in (
            (allocated, self.allocated_by_tier),
            (held_by_tenant, self.held_by_tenant),
        ):
            for name, count in values.items():
                table.setdefault(name, [0.0] * (len(self.times) - 1)).append(count)
        for name, wanted in wanted_by_tenant.items():
            self.wanted_by_tenant.setdefault(name, [0] * (len(self.times) - 1)).append(wanted)
        self.pending_jobs.append(pending)
        self.demand.append(demand)
        self.partial_held.append(partial_held)
        self.largest_gang.append(largest_gang)


@dataclass(slots=True)
class Outcome:
    """Everything a report needs about one policy over one trace."""

    policy: str
    trace: Trace
    records: dict[JobKey, JobRecord]
    timeline: Timeline
    cycles: int = 0
    evictions: int = 0
    grows: int = 0
    """Running elastic gangs given more replicas (rule 13)."""
    shrinks: int = 0
    """Elastic gangs a preemptor shrank instead of evicting them (rule 13)."""
    device_seconds_lost: float = 0.0
    """Device-time of evicted or resized gangs' work since their last checkpoint (they resume
    from it), and of their restarts."""
    lost_by_cause: dict[str, float] = field(default_factory=dict)
    """`device_seconds_lost` split by why the victims went: "PREEMPTOR_TIER > VICTIM_TIER"
    for an eviction by tier, "reclaim by PREEMPTOR_TIER" for a reclaim of nominal quota, either
    followed by " (shrink)" for a shrink, and "grow" for a gang re-formed at a larger size; the
    restart of a re-admitted victim or a resized gang counts with its cause."""
    slips: dict[str, list[float]] = field(default_factory=dict)
    """Seconds each reservation moved later, by cause: `outlived` (a gang it waited on ran
    past its prediction) or `arrival` (a higher-ordered job took the devices first)."""
    predictions: list[tuple[float, float]] = field(default_factory=list)
    """(predicted, actual) run of every job that ran to its end, predicted at first start."""
    gang_start_failures: int = 0
    """Partial gangs torn down because their last replica did not start in time."""
    deadlocks: int = 0
    counter_overcommits: int = 0
    """Admissions that left a GPU's shared counters over-committed (rule 12): must stay 0."""
    wall_s: float = 0.0
