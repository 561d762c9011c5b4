"""The vocabulary of the decision core: what a scheduling cycle reads and what it decides.

Every type is a frozen, slotted dataclass so a snapshot can be shared and compared safely.
Edges (the store, the Kubernetes caches, the API) translate into and out of these types; this
module holds no behaviour beyond small derived properties and must not import anything with I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple, NewType

from gangq.queue.core import explain
from gangq.queue.core.device import CounterSetId, Device, DeviceId

JobKey = NewType("JobKey", str)
"""`namespace/name` of a TrainingJob: the one name a job has in the store, the API and the core."""

Tenant = NewType("Tenant", str)
"""A team; namespaces map to it through the namespace label `gangq.dev/tenant`."""

NodeName = NewType("NodeName", str)


class TopologyMode(enum.StrEnum):
    """How strictly all replicas must share one domain of the job's topology key (rule 7)."""

    REQUIRED = "Required"
    PREFERRED = "Preferred"
    NONE = "None"


@dataclass(frozen=True, slots=True)
class Tier:
    """A preemption tier; a higher `rank` is more important and may preempt lower ranks."""

    name: str
    rank: int
    min_runtime_before_preemption_s: float = 0.0
    """Protects fresh gangs from thrashing; reclaiming nominal quota ignores it."""
    long_running: bool = False
    """Serving tiers never finish by themselves, so backfill must not count on their end."""
    preemption_delay_s: float = 0.0
    """A job of this tier evicts nobody (reclaim included) until it has waited this long: where
    short jobs turn over every few minutes, waiting for one to end costs a minute, while
    evicting a training gang for a 1-GPU job throws away hours of its work."""
    always_preempts: bool = False
    """Evicts lower tiers without weighing their lost work against its wait (serving
    capacity must not queue); it still picks the cheapest victims."""


DEFAULT_TIERS: tuple[Tier, ...] = (
    Tier(
        "prod-inference",
        300,
        min_runtime_before_preemption_s=0.0,
        long_running=True,
        always_preempts=True,
    ),
    Tier("training", 200, min_runtime_before_preemption_s=600.0),
    Tier("small", 100, min_runtime_before_preemption_s=60.0, preemption_delay_s=300.0),
)

DEFAULT_RESTART_S = 300.0
"""What an evicted gang takes to come back, per device, when its job does not say
(`spec.restartSeconds`): loading its checkpoint and re-forming the gang, minutes on GPU
clusters, during which its devices do no work."""


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A tenant's share of one device class (PRODUCT §3); use above `nominal` is borrowed."""

    tenant: Tenant
    device_class: str
    nominal: int
    borrowing_limit: int = 0
    weight: float = 1.0
    allowed_tiers: tuple[str, ...] = ()
    """Tier names this tenant may submit to; empty means every tier."""


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (`spec.taints[]`)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        """`key=value:Effect`, as `kubectl taint` takes it, for reports and reasons."""
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration; an empty key with operator Exists tolerates every taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One `matchExpressions` entry: operator In, NotIn, Exists, DoesNotExist, Gt or Lt."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold; a pod's terms are ORed."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRequirements:
    """What one replica's pod needs from its node besides devices (from the pod template)."""

    cpu_milli: int = 0
    memory_bytes: int = 0
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    """Sorted (label, value) pairs; a tuple keeps the type hashable for per-cycle caches."""
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()
    """`requiredDuringSchedulingIgnoredDuringExecution` terms; empty means no constraint."""


@dataclass(frozen=True, slots=True)
class Node:
    """A Kubernetes node with what is left for gangq pods after the pods gangq did not make."""

    name: NodeName
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unready_reason: str = ""
    """Why the node is not Ready, as its Ready condition says (`reason: message`): what a gang
    torn down for the node's loss reports; empty when Ready."""
    unschedulable: bool = False
    """`spec.unschedulable` (cordoned)."""
    allocatable_cpu_milli: int = 0
    allocatable_memory_bytes: int = 0
    allocatable_pods: int = 110
    requested_cpu_milli: int = 0
    """Requested by pods bound here that do not belong to a gangq job."""
    requested_memory_bytes: int = 0
    pod_count: int = 0

    @property
    def is_schedulable(self) -> bool:
        return self.ready and not self.unschedulable


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass: its CEL selectors must all accept a device for the class to include it."""

    name: str
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Inventory:
    """Everything allocatable in the cluster, as the watch caches see it at one instant."""

    nodes: Mapping[NodeName, Node] = field(default_factory=dict, hash=False)
    devices: Mapping[DeviceId, Device] = field(default_factory=dict, hash=False)
    device_classes: Mapping[str, DeviceClass] = field(default_factory=dict, hash=False)
    held_by_others: frozenset[DeviceId] = frozenset()
    """Allocated by ResourceClaims gangq did not make: used, never free (PRODUCT §3)."""
    counters: Mapping[CounterSetId, Mapping[str, int]] = field(default_factory=dict, hash=False)
    """Shared counter sets of every pool (`sharedCounters`), in thousandths."""
    shared_by_others: Mapping[DeviceId, tuple[tuple[str, int], ...]] = field(
        default_factory=dict, hash=False
    )
    """Capacity of multi-allocatable devices that claims gangq did not make consume."""
    topology_keys: tuple[str, ...] = ()
    """Node label keys that define topology domains (rack, zone, clique), for reports."""


@dataclass(frozen=True, slots=True)
class Topology:
    """The job's `topology` stanza; `key` is a node label key such as `gangq.dev/rack`."""

    key: str = ""
    mode: TopologyMode = TopologyMode.NONE


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A queued gang: `replicas` x `devices_per_replica`, admitted all-or-nothing (rule 2)."""

    key: JobKey
    uid: str
    tenant: Tenant
    tier: str
    priority: int = 0
    replicas: int = 1
    devices_per_replica: int = 1
    device_class: str = ""
    selectors: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    """Qualified `matchAttribute` names shared by all devices of one replica."""
    capacity_requests: tuple[tuple[str, int], ...] = ()
    """`capacity.requests` (name -> thousandths, sorted): each device is a share of a
    multi-allocatable device, or one with at least this capacity."""
    topology: Topology = Topology()
    pod: PodRequirements = PodRequirements()
    submitted_at: float = 0.0
    max_runtime_s: float | None = None
    """Upper bound of the run (the job is stopped past it); None means it never ends by itself."""
    share_milli: int | Fraction = 1000
    """GPU-equivalents one of its devices counts for in quotas, in thousandths: 1000 for whole
    devices; the cycle sets the largest a matching partition or share may count for."""
    predicted_runtime_s: float | None = None
    """Expected run from the history of similar jobs (module `prediction`), at most
    `max_runtime_s`; None: no better guess than `max_runtime_s`."""
    queued_at: float | None = None
    """When the job last entered the queue (a requeued victim: its eviction); None: at its
    submission. A reclaim counts its tenant's wait from here (rule 6), not from a
    submission the job has since run after."""
    checkpoint_interval_s: float | None = None
    """The job's declared checkpoint interval; None: it saves none an eviction could resume
    from, so borrowing devices a reclaim may soon want would risk its whole run
    (`borrowing.risks_reclaim`)."""
    restart_s: float = DEFAULT_RESTART_S
    """`spec.restartSeconds`: what each eviction costs it besides lost work (see RunningJob)."""
    checkpoint_grace_s: float | None = None
    """`spec.preemption.checkpointGraceSeconds`: an eviction first asks the gang for a
    checkpoint and waits up to this long for it; None: evicted at once."""
    min_replicas: int | None = None
    """`spec.elastic.minReplicas` (rule 13), 1 to `replicas`: the job may start as a gang of
    any size from this to `replicas`, its maximum (module `elastic`); None: only at
    `replicas`."""
    preempted_at: float | None = None
    """When the job, queued, last evicted or shrank gangs to make room for itself; None:
    never since it last entered the queue."""

    @property
    def device_count(self) -> int:
        return self.replicas * self.devices_per_replica

    @property
    def paying_since(self) -> float:
        """Since when its wait pays for an eviction (rule 6, ski rental): its last entry into
        the queue, or its last eviction if later. A wait pays for one eviction only: a job
        whose victim's node frees before the rest of its place, and is taken back in the
        meantime, would otherwise evict the same gang again on the same wait, cycle after
        cycle (on an acme week one 2 x 8 reclaim evicted one borrower 60 times in 4 h)."""
        if self.preempted_at is None:
            return self.waiting_since
        return max(self.waiting_since, self.preempted_at)

    @property
    def is_elastic(self) -> bool:
        """The job may start smaller than `replicas`."""
        return self.min_replicas is not None and self.min_replicas < self.replicas

    @property
    def waiting_since(self) -> float:
        return self.submitted_at if self.queued_at is None else self.queued_at

    @property
    def equivalent_milli(self) -> int | Fraction:
        """What the job counts for in quotas: GPU-equivalents in thousandths (rule 3)."""
        return self.replicas * self.devices_per_replica * self.share_milli


class Share(NamedTuple):
    """The part of a multi-allocatable device one replica holds (`consumedCapacity`)."""

    device: DeviceId
    consumed: tuple[tuple[str, int], ...]
    """Qualified capacity name -> thousandths."""
    share_id: str = ""
    """The allocation's `shareID` (a UUID), given when the reservation is stored."""


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """The node and exact devices of one replica; devices in `shares` are held in part."""

    replica: int
    node: NodeName
    devices: tuple[DeviceId, ...]
    shares: tuple[Share, ...] = ()


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A gang that holds devices: admitted (reserved) or running. `started_at` is the admission
    time until its pods start, then their start time."""

    key: JobKey
    uid: str
    tenant: Tenant
    tier: str
    priority: int
    device_class: str
    placement: tuple[ReplicaPlacement, ...]
    started_at: float
    max_runtime_s: float | None = None
    borrowed: int = 0
    """Devices of this gang counted above its tenant's nominal quota (rule 3)."""
    is_evicting: bool = False
    """Already chosen as a victim: its devices are coming free and count as such (rule 6)."""
    evicting_by: float | None = None
    """For a victim asked for a checkpoint first: when its grace ends, the latest its devices
    come free; None: they come free as soon as its pods are gone."""
    pod: PodRequirements = PodRequirements()
    submitted_at: float = 0.0
    predicted_end_at: float | None = None
    """When the gang is expected to free its devices (module `prediction`), at most `ends_at`;
    None: no better guess than `ends_at`."""
    last_checkpoint_at: float | None = None
    """When the gang last reported a saved checkpoint; an eviction loses only the work since."""
    checkpoint_interval_s: float | None = None
    """The job's declared checkpoint interval: an eviction loses at most this much of its run."""
    checkpoint_grace_s: float | None = None
    """`spec.preemption.checkpointGraceSeconds`: an eviction or shrink first asks the gang for
    a checkpoint and waits up to this long for it; None: it goes at once."""
    restart_s: float = DEFAULT_RESTART_S
    """Seconds an evicted gang needs to come back (load its checkpoint, re-form the gang),
    each of its devices idle meanwhile: part of what an eviction costs (rule 6)."""
    lost_before_device_s: float = 0.0
    """Device-seconds of this job's work earlier evictions destroyed: they count against
    evicting it again, so one gang is not the cheapest victim over and over (rule 6)."""
    min_replicas: int | None = None
    """An elastic gang's `spec.elastic.minReplicas` (rule 13): a preemptor may shrink it down
    to this many replicas (replica 0 always stays) instead of evicting it; None: it only
    goes whole."""
    device_count: int = field(init=False, repr=False, compare=False)
    """Devices the gang holds: read for every candidate of every victim search and backfill
    sweep, so counted once."""

    def __post_init__(self) -> None:
        count = sum(len(replica.devices) for replica in self.placement)
        object.__setattr__(self, "device_count", count)

    @property
    def size(self) -> int:
        """The replicas it runs with: 0 to the highest it holds (a shrinking gang's leaving
        part counts only its own, see `elastic.split`)."""
        return max((replica.replica for replica in self.placement), default=-1) + 1

    def unsaved_s(self, now: float) -> float:
        """Wall time of the run a return to the last checkpoint loses (an eviction, or the
        re-forming of a resize): since the later of the start and the last checkpoint, and
        at most one declared checkpoint interval."""
        since = now - max(self.started_at, self.last_checkpoint_at or self.started_at)
        if self.checkpoint_interval_s is not None:
            since = min(since, self.checkpoint_interval_s)
        return max(since, 0.0)

    def lost_work_device_s(self, now: float, *, asked: bool = True) -> float:
        """Device-seconds of work an eviction now destroys (rule 6): every device's
        `unsaved_s`. A gang that opted in to be asked first saves when asked, so with `asked`
        it loses at most its grace: opting in promises the answer, and one that breaks it
        loses its run, which then counts against evicting it again (`lost_before_device_s`).
        Without `asked` it is weighed as if it went at once."""
        unsaved = self.unsaved_s(now)
        if asked and self.checkpoint_grace_s is not None:
            unsaved = min(unsaved, self.checkpoint_grace_s)
        return self.device_count * unsaved

    def eviction_cost_device_s(self, now: float, *, asked: bool = True) -> float:
        """What evicting the gang now costs in device-seconds (rule 6): the work it destroys
        (`lost_work_device_s`), its restart, and the work earlier evictions already
        destroyed."""
        restart = self.device_count * self.restart_s
        return self.lost_work_device_s(now, asked=asked) + restart + self.lost_before_device_s

    @property
    def ends_at(self) -> float | None:
        """When the gang is stopped at the latest; None for a gang without a runtime bound."""
        if self.max_runtime_s is None:
            return None
        return self.started_at + self.max_runtime_s


@dataclass(frozen=True, slots=True)
class Admission:
    """A decision to admit `job` on exactly these devices; `borrowed` devices exceed nominal."""

    job: JobKey
    placement: tuple[ReplicaPlacement, ...]
    borrowed: int = 0


@dataclass(frozen=True, slots=True)
class Victim:
    """A whole gang to evict (rule 6: whole gangs only) and the reason shown to its owner."""

    job: JobKey
    reason: str
    lost_device_s: float = 0.0
    """Work the eviction destroys (devices x time since the last checkpoint), for the ledger."""
    reclaim: bool = False
    """It goes only because the preemptor's tenant takes back nominal quota, not by tier."""
    keep: int | None = None
    """A shrink instead of an eviction (rule 13): the elastic gang keeps replicas 0 to
    `keep` - 1, gives back the others and keeps running; None: evicted whole."""


@dataclass(frozen=True, slots=True)
class Grow:
    """Whole replicas added to a running elastic gang (rule 13) on exactly these devices,
    all-or-nothing like an admission; `placement` numbers them on from the gang's current
    size, and `borrowed` devices of them exceed the tenant's nominal quota."""

    job: JobKey
    placement: tuple[ReplicaPlacement, ...]
    borrowed: int = 0

    @property
    def size(self) -> int:
        """The replicas the gang runs with once grown."""
        return max(replica.replica for replica in self.placement) + 1


@dataclass(frozen=True, slots=True)
class Preemption:
    """`job` stays pending until these victims are gone; then a later cycle admits it. No
    victims means gangs already being evicted free enough: the job only waits for them."""

    job: JobKey
    victims: tuple[Victim, ...]


@dataclass(frozen=True, slots=True)
class BackfillReservation:
    """The earliest start of the first blocked job of a tier, on concrete nodes (rule 5)."""

    job: JobKey
    tier: str
    start_at: float
    """Unix seconds; an ETA is `start_at - now`."""
    nodes: tuple[NodeName, ...]
    outlived: tuple[JobKey, ...] = ()
    """Gangs the start waits on that outlived their prediction: why it moved later."""


@dataclass(frozen=True, slots=True)
class ServingStart:
    """An admission of a job of a tier that always preempts: what its tenant's daily
    scale-ups are forecast from (module `serving`)."""

    tenant: Tenant
    device_class: str
    replicas: int
    devices_per_replica: int
    at: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The whole input of one cycle: inventory, quotas, gangs holding devices, the queue."""

    inventory: Inventory
    quotas: tuple[TenantQuota, ...] = ()
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    growable: tuple[PendingJob, ...] = ()
    """Running elastic gangs below their maximum that may grow (neither evicting, shrinking nor
    growing), each as the job at its maximum (`elastic.growable`): the cycle adds replicas
    after every queued job is decided, on devices none of them can use (rule 13)."""
    serving_starts: tuple[ServingStart, ...] = ()
    """Admissions of the tiers that always preempt over the last `Policy.serving_forecast_days`
    days (older ones are ignored)."""
    free_since: Mapping[DeviceId, float] = field(default_factory=dict, hash=False)
    """When each device last came free (its last gangq holder released it). A preemption by
    tier counts a free device's idle time from here (rule 6); a device missing has been free
    at least since anything pending queued."""


DEFAULT_PREEMPTION_COST_FACTOR = 0.25
"""An eviction pays once waiting has cost four times what it destroys: it never destroys more
than a quarter of the idle (or kept) device-time before it, and the two together never cost
more than five times the better of waiting and evicting at once. At the break-even, 1, that
bound is twice, but on weeks shaped like public GPU-cluster traces, where most victims save no
checkpoint, those evictions destroyed more than the idle time they ended gave back: on philly
seeds 1-5, 0.25 halved lost work (2.2 % to 1.1 % of capacity) at 1.0 point more useful
utilization (docs/sim.md, "An eviction pays at a quarter of what waiting cost")."""


@dataclass(frozen=True, slots=True)
class Policy:
    """Cluster-wide knobs of the cycle."""

    tiers: tuple[Tier, ...] = DEFAULT_TIERS
    managed_device_classes: tuple[str, ...] = ()
    """DeviceClass names gangq allocates; a job asking for another class is invalid."""
    topology_keys: tuple[str, ...] = ("gangq.dev/rack",)
    """Topology label keys; placement keeps whole domains of the first one free for big gangs."""
    preemption: bool = True
    backfill: bool = True
    preemption_cost_factor: float = DEFAULT_PREEMPTION_COST_FACTOR
    """Preemption pays (rule 6) when the victims' lost device-seconds are at most this times
    what waiting has cost: the device-time a reclaimer's job kept its tenant from its nominal
    quota, or that the free devices of a tier preemptor's place stood idle (docs/sim.md)."""
    unsaved_borrow_s: float | None = None
    """When set, a borrower that declares no checkpoint interval leaves free the share of
    other tenants' unused nominal quota that its expected run is of this (all of it for a run
    this long or unbounded): a reclaim would destroy all its work, or keep a tenant under
    nominal waiting until it ends. None: such borrowers leave only what tenants waiting now
    are owed (module `owed`), as every borrower does; measured on weeks shaped like public
    traces, holding them back further cost utilization and waits and saved no work once
    reclaims pay for themselves (docs/sim.md)."""
    serving_forecast_days: int | None = 7
    """Days of admissions of the tiers that always preempt that their next daily scale-up is
    forecast from; before it, one place is kept that evicting would cost little (module
    `serving`). None: no forecast, the scale-up clears whatever place costs least then."""
    preemption_search_steps: int = 3_000
    """Candidate gangs all victim searches of one cycle may examine; jobs whose search is cut
    short keep a capacity reason and are searched again in the next cycle."""


@dataclass(frozen=True, slots=True)
class CycleResult:
    """The decisions of one cycle; every pending job that is not admitted has a reason."""

    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: Mapping[JobKey, explain.PendingReason] = field(default_factory=dict, hash=False)
    positions: Mapping[JobKey, int] = field(default_factory=dict, hash=False)
    """1-based place among the jobs still pending, in queue order (rule 4)."""
    reservations: tuple[BackfillReservation, ...] = ()
    order: tuple[JobKey, ...] = ()
    """Every pending job of the snapshot in the order the cycle considered them."""
    grows: tuple[Grow, ...] = ()
    decide_again_at: float | None = None
    """The first instant a reclaim that waits now would pay (rule 6): the time alone changes
    a decision then, with no event in between (a simulator wakes up for it)."""
