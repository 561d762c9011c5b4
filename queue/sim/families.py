"""Trace families shaped by public GPU-cluster traces: Philly, Helios, PAI and Acme.

Owns the generators only: one parameter table per family, each figure taken from the trace's
paper or its own published summaries (docs/sim.md cites them), mapped onto the reference
cluster with a prod tenant (nominal 24, steady serving) and five training tenants (nominal 8,
borrowing limit 56). A week offers the load asked for to within half a point: jobs are drawn,
each placed by day of week and hour of day, until their device-time reaches it.
The same family, seed, days and load give the same trace, job for job.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from dataclasses import dataclass

from gangq.queue.core.model import JobKey, Tenant, TenantQuota, Topology, TopologyMode
from gangq.queue.sim import mixed, reference
from gangq.queue.sim.cluster import RACK_LABEL
from gangq.queue.sim.load import offered_device_s
from gangq.queue.sim.reference import CLUSTER, DAY, HOUR
from gangq.queue.sim.trace import Trace, TraceJob

TENANTS = ("vision", "speech", "nlp", "recsys", "robotics")
NOMINAL = 8
BORROWING_LIMIT = 56
PROD_NOMINAL = 24
DEFAULT_LOAD = 0.9
LOAD_TOLERANCE = 0.005
"""A week's offered load is within this of the one asked for (a fraction of capacity)."""
MAX_GANG_GPUS = 48
"""Jobs asking for more GPUs than the traces' clusters' 64 are capped here: 48 is the largest
gang the reference cluster can start beside prod's steady 2 x 8 serving."""
MIN_RUN_S = 30.0
"""Shorter runs (crashes at startup) are kept at this length."""
RUN_SIGMA = 0.5
"""Spread of one job family's runs around the family's median (log-normal): the rest of a
trace's spread is between families, which is what history-based prediction can learn."""
FAMILIES_PER_SHAPE = 4
"""Job families per tenant and job size."""
BOUND_FACTOR = (1.2, 3.0)
"""`maxRuntime` as a multiple of the run the job was meant to do."""
FAILED_FRACTION = (0.01, 0.2)
CANCELLED_FRACTION = (0.2, 1.0)
"""Fractions of the intended run a failed (early) or cancelled job gets through."""
CHECKPOINT_MIN_GPUS = 16
CHECKPOINT_INTERVAL_S = (30 * 60.0, 60 * 60.0)
ASKED_FIRST_SHARE = 0.5
"""Share of the jobs that save checkpoints that also opt in to be asked for one before an
eviction or shrink (`checkpointGraceSeconds`, rule 6). No trace records it: a job that saves
checkpoints needs only to answer the request with a save it can already make, and half is an
assumption, stated in docs/sim.md. A job that saves none could not answer, so none opts in."""
ASKED_FIRST_GRACE_S = 120.0
"""Their grace: two saves of `sim.engine.CHECKPOINT_SAVE_S`, PRODUCT.md's example."""
ELASTIC_SHARE = 0.3
"""Share of multi-replica training jobs that are elastic, with `minReplicas` half their
replicas rounded up. No trace records elasticity; torchrun elastic and DeepSpeed jobs are
commonly run at half their size, and 30 % is the share of gangs the product's goal for elastic
jobs is stated for."""
WEEKDAY = (1.0, 1.0, 1.05, 1.0, 1.0, 0.75, 0.8)
"""Relative arrivals Monday to Sunday (PAI's week of task submissions); day 0 is a Monday."""
HELIOS_HOURLY = (
    *(140, 142, 115, 105, 98, 88, 85, 85, 95, 138, 185, 198),
    *(175, 188, 207, 235, 242, 220, 182, 188, 203, 195, 175, 180),
)
"""GPU jobs submitted per hour of day in Helios' busiest cluster (Saturn)."""
PAI_HOURLY = (
    *(1100, 850, 550, 450, 520, 550, 620, 800, 620, 680, 1080, 1100),
    *(720, 800, 1000, 980, 1080, 720, 700, 700, 750, 680, 620, 600),
)
"""Median tasks submitted per hour of day in PAI."""


@dataclass(frozen=True, slots=True)
class Family:
    """What one public trace says about its GPU jobs (docs/sim.md: sources and fits)."""

    name: str
    gpus: tuple[tuple[int, float], ...]
    """(GPUs a job asks for, share of jobs)."""
    median_s: float
    """Median duration of a GPU job, whatever its outcome."""
    sigma: float
    """Log-normal spread of durations, fitted to the median and the 90th percentile."""
    size_exponent: float
    """A job of g GPUs runs (g / typical)^exponent times as long as a typical one."""
    max_s: float
    """The longest run in the trace."""
    outcomes: tuple[float, float, float]
    """Shares of jobs that finished, failed and were cancelled."""
    hourly: tuple[int, ...]
    """Relative arrivals by hour of day, 0 to 23."""
    checkpointing: float
    """Share of jobs of at least `CHECKPOINT_MIN_GPUS` GPUs that save checkpoints."""

    @property
    def typical_gpus(self) -> float:
        """The job-weighted geometric mean of GPUs per job: the size the median is for."""
        return math.exp(sum(share * math.log(gpus) for gpus, share in self.gpus))


PHILLY = Family(
    name="philly",
    gpus=((1, 0.82), (2, 0.025), (4, 0.075), (8, 0.065), (16, 0.01), (32, 0.004), (48, 0.001)),
    median_s=874.0,
    sigma=2.7,
    size_exponent=0.8,
    max_s=4_240_676.0,
    outcomes=(0.604, 0.305, 0.090),
    hourly=HELIOS_HOURLY,
    checkpointing=0.0,
)
HELIOS = Family(
    name="helios",
    gpus=((1, 0.72), (2, 0.025), (4, 0.055), (8, 0.165), (16, 0.012), (32, 0.013), (48, 0.01)),
    median_s=206.0,
    sigma=2.9,
    size_exponent=0.6,
    max_s=4_320_009.0,
    outcomes=(0.624, 0.155, 0.221),
    hourly=HELIOS_HOURLY,
    checkpointing=0.0,
)
PAI = Family(
    name="pai",
    gpus=((1, 0.97), (2, 0.012), (4, 0.01), (8, 0.008)),
    median_s=481.0,
    sigma=2.8,
    size_exponent=0.4,
    max_s=626_371.0,
    outcomes=(0.575, 0.296, 0.129),
    hourly=PAI_HOURLY,
    checkpointing=0.0,
)
ACME = Family(
    name="acme",
    gpus=((1, 0.54), (2, 0.115), (4, 0.025), (8, 0.28), (16, 0.01), (32, 0.01), (48, 0.02)),
    median_s=122.0,
    sigma=2.0,
    size_exponent=0.25,
    max_s=1_209_604.0,
    outcomes=(0.497, 0.429, 0.075),
    hourly=HELIOS_HOURLY,
    checkpointing=0.5,
)
FAMILIES = {family.name: family for family in (PHILLY, HELIOS, PAI, ACME)}


def quotas() -> tuple[TenantQuota, ...]:
    prod = TenantQuota(
        tenant=Tenant("prod"),
        device_class=CLUSTER.device_class,
        nominal=PROD_NOMINAL,
        borrowing_limit=0,
        allowed_tiers=("prod-inference",),
    )
    return (
        prod,
        *mixed.training_quotas(TENANTS, nominal=NOMINAL, borrowing_limit=BORROWING_LIMIT),
    )


def shape_of(gpus: int) -> tuple[int, int]:
    """(replicas, devices per replica): whole 8-GPU nodes beyond one node."""
    if gpus <= 8:
        return 1, gpus
    return gpus // 8, 8


class _Arrivals:
    """Arrival instants drawn by day of week, then hour of day, then uniformly in the hour."""

    def __init__(self, family: Family, *, days: int) -> None:
        self.days = days
        self.day_weights = list(itertools.accumulate(WEEKDAY[day % 7] for day in range(days)))
        self.hour_weights = list(itertools.accumulate(family.hourly))

    def draw(self, rng: random.Random) -> float:
        day = rng.choices(range(self.days), cum_weights=self.day_weights)[0]
        hour = rng.choices(range(24), cum_weights=self.hour_weights)[0]
        return round(day * DAY + hour * HOUR + rng.uniform(0.0, HOUR))


@dataclass(frozen=True, slots=True)
class Drawn:
    """A drawn job and how it ends: `finished`, `failed` (early) or `cancelled`."""

    job: TraceJob
    outcome: str


class _Jobs:
    """Draws one family's jobs: size, family median, run, outcome, bound and checkpoints
    from `rng`; elasticity and opting in to be asked first each from a stream of its own
    (`Habits`), so that every other draw of a seed and load is the one made before jobs
    had them."""

    def __init__(self, family: Family, rng: random.Random, habits: Habits) -> None:
        self.family = family
        self.rng = rng
        self.habits = habits
        self.sizes = [gpus for gpus, _ in family.gpus]
        self.size_weights = list(itertools.accumulate(share for _, share in family.gpus))
        self.medians = {
            (tenant, gpus, index): median
            for tenant in TENANTS
            for gpus in self.sizes
            for index, median in enumerate(self._family_medians(gpus))
        }
        self.count = 0

    def _family_medians(self, gpus: int) -> list[float]:
        """One median per family of a tenant's jobs of this size, stratified over the
        between-family spread (one draw in each quantile band, in random order), so that a
        week's few families span the cited distribution instead of clustering by chance."""
        family, rng = self.family, self.rng
        between = math.sqrt(max(family.sigma**2 - RUN_SIGMA**2, 0.0))
        centre = family.median_s * (gpus / family.typical_gpus) ** family.size_exponent
        normal = statistics.NormalDist()
        medians = [
            centre * math.exp(between * normal.inv_cdf((band + rng.random()) / FAMILIES_PER_SHAPE))
            for band in range(FAMILIES_PER_SHAPE)
        ]
        rng.shuffle(medians)
        return medians

    def draw(self, arrival: float) -> Drawn:
        rng, family = self.rng, self.family
        tenant = rng.choice(TENANTS)
        gpus = rng.choices(self.sizes, cum_weights=self.size_weights)[0]
        index = rng.randrange(FAMILIES_PER_SHAPE)
        median = self.medians[(tenant, gpus, index)]
        runtime = min(
            max(MIN_RUN_S, round(median * math.exp(rng.gauss(0.0, RUN_SIGMA)))), family.max_s
        )
        outcome = rng.choices(("finished", "failed", "cancelled"), family.outcomes)[0]
        intended = runtime
        if outcome == "failed":
            intended = runtime / rng.uniform(*FAILED_FRACTION)
        elif outcome == "cancelled":
            intended = runtime / rng.uniform(*CANCELLED_FRACTION)
        bound = math.ceil(intended * rng.uniform(*BOUND_FACTOR))
        checkpoint = grace = None
        if gpus >= CHECKPOINT_MIN_GPUS and rng.random() < family.checkpointing:
            checkpoint = round(rng.uniform(*CHECKPOINT_INTERVAL_S))
            if self.habits.asking.random() < ASKED_FIRST_SHARE:
                grace = ASKED_FIRST_GRACE_S
        replicas, per_replica = shape_of(gpus)
        tier = "small" if gpus <= 2 else "training"
        topology = Topology()
        least = None
        if replicas > 1:
            topology = Topology(RACK_LABEL, TopologyMode.PREFERRED)
            if tier == "training" and self.habits.elastic.random() < ELASTIC_SHARE:
                least = math.ceil(replicas / 2)
        self.count += 1
        job = TraceJob(
            key=JobKey(f"{tenant}/job-{gpus}g-{self.count}"),
            arrival_s=arrival,
            tenant=Tenant(tenant),
            tier=tier,
            replicas=replicas,
            devices_per_replica=per_replica,
            runtime_s=runtime,
            max_runtime_s=bound,
            topology=topology,
            checkpoint_interval_s=checkpoint,
            checkpoint_grace_s=grace,
            family=f"{replicas}x{per_replica}-{'abcd'[index]}",
            min_replicas=least,
        )
        return Drawn(job, outcome)


@dataclass(frozen=True, slots=True)
class Habits:
    """The random streams of what a job does besides its run: each its own, so that adding
    one left every earlier draw of a seed as it was."""

    elastic: random.Random
    asking: random.Random


def _habits(family: Family, *, seed: int) -> Habits:
    return Habits(
        elastic=random.Random(f"{family.name}-elastic-{seed}"),
        asking=random.Random(f"{family.name}-asked-{seed}"),
    )


def sample(family: Family, *, seed: int, count: int, days: int = 7) -> list[Drawn]:
    """The first `count` jobs `generate` draws for this seed, with their outcomes, whatever
    the load: what the family's statistics are checked on."""
    rng = random.Random(f"{family.name}-{seed}")
    arrivals = _Arrivals(family, days=days)
    draws = _Jobs(family, rng, _habits(family, seed=seed))
    return [draws.draw(arrivals.draw(rng)) for _ in range(count)]


def generate(family: Family, *, seed: int, days: int = 7, load: float = DEFAULT_LOAD) -> Trace:
    """`days` of the family offering `load` (device-time asked before the horizon / capacity
    x horizon, prod's serving included); jobs sorted by arrival.

    Jobs are drawn one by one, each at an instant of the family's arrival profile, until their
    offered device-time is within `LOAD_TOLERANCE` of the load; a draw that would overshoot
    it by more is dropped (only the last, small gaps are filled that way). A heavier load is
    thus a higher arrival rate of the same jobs."""
    horizon = days * DAY
    rng = random.Random(f"{family.name}-{seed}")
    jobs = list(reference.prod_jobs(random.Random(f"{family.name}-prod-{seed}"), days=days))
    remaining = load * CLUSTER.capacity * horizon - sum(
        offered_device_s(job, horizon_s=horizon) for job in jobs
    )
    arrivals = _Arrivals(family, days=days)
    draws = _Jobs(family, rng, _habits(family, seed=seed))
    tolerance = LOAD_TOLERANCE * CLUSTER.capacity * horizon
    while remaining > tolerance:
        job = draws.draw(arrivals.draw(rng)).job
        asked = offered_device_s(job, horizon_s=horizon)
        if asked - remaining <= tolerance:
            jobs.append(job)
            remaining -= asked
    jobs.sort(key=lambda job: (job.arrival_s, job.key))
    return Trace(cluster=CLUSTER, quotas=quotas(), jobs=tuple(jobs), horizon_s=horizon)
