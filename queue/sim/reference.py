"""The reference trace: the product's three worlds on 8 nodes x 8 H100 in 2 racks, by seed.

Owns the generator only: steady prod inference (2 x 8, never ending) with a daily scale-up
replica at the afternoon peak, 4x8 and 2x8 training gangs from two tenants (most of them
checkpointing every 30-60 min), and a diurnal swarm of short 1-GPU jobs that never checkpoint.
The same seed and days give the same trace, job for job.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from gangq.queue.core.model import JobKey, Tenant, TenantQuota, Topology, TopologyMode
from gangq.queue.sim import trace
from gangq.queue.sim.cluster import RACK_LABEL
from gangq.queue.sim.trace import ClusterSpec, Trace, TraceJob

HOUR = 3600.0
DAY = 24 * HOUR
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
CLUSTER = ClusterSpec()


def _quota(
    tenant: str, nominal: int, borrowing: int, weight: float, tiers: tuple[str, ...]
) -> TenantQuota:
    return TenantQuota(
        tenant=Tenant(tenant),
        device_class=CLUSTER.device_class,
        nominal=nominal,
        borrowing_limit=borrowing,
        weight=weight,
        allowed_tiers=tiers,
    )


QUOTAS = (
    _quota("prod", 24, 0, 1.0, ("prod-inference",)),
    _quota("ml-train", 32, 32, 2.0, ("training", "small")),
    _quota("ci", 8, 8, 1.0, ("small",)),
    _quota("research", 0, 32, 1.0, ("training", "small")),
)


@dataclass(frozen=True, slots=True)
class GangStream:
    """Poisson arrivals of one training gang shape for one tenant; `checkpointing` of its
    gangs save a checkpoint every 30 to 60 minutes."""

    tenant: str
    replicas: int
    mean_interval_s: float
    runtime_s: tuple[float, float]
    topology: Topology = trace.NO_TOPOLOGY
    checkpointing: float = 0.0


GANG_STREAMS = (
    GangStream(
        "ml-train",
        4,
        24 * HOUR,
        (4 * HOUR, 14 * HOUR),
        Topology(RACK_LABEL, TopologyMode.PREFERRED),
        checkpointing=0.8,
    ),
    GangStream("ml-train", 2, 9 * HOUR, (1 * HOUR, 6 * HOUR), checkpointing=0.6),
    GangStream("research", 2, 10 * HOUR, (1 * HOUR, 5 * HOUR), checkpointing=0.4),
    GangStream(
        "research",
        4,
        48 * HOUR,
        (3 * HOUR, 8 * HOUR),
        Topology(RACK_LABEL, TopologyMode.PREFERRED),
        checkpointing=0.7,
    ),
)
FAMILIES_PER_STREAM = 3
"""A stream's runs come from this many job families, each covering a third of its runtime
range: runs of one family are alike, as a model's successive fine-tunes are."""
CHECKPOINT_INTERVAL_S = (30 * 60.0, 60 * 60.0)
SMALL_MEAN_INTERVAL_S = 100.0
SMALL_MEAN_RUNTIME_S = 12 * 60.0
SMALL_MAX_RUNTIME_S = 30 * 60.0
SMALL_TENANTS = (("ci", 0.7), ("ml-train", 0.2), ("research", 0.1))


def _bound(runtime_s: float) -> float:
    """maxRuntime as people set it: a quarter above the expected run, rounded up to the hour."""
    return math.ceil(runtime_s * 1.25 / HOUR) * HOUR


def prod_jobs(rng: random.Random, *, days: int) -> Iterator[TraceJob]:
    """Steady serving (2 x 8, never ending) and a scale-up replica each afternoon: the
    prod tenant's 24 nominal devices, the same in every generated scenario that has one."""
    yield TraceJob(
        key=JobKey("inference/llm-prod"),
        arrival_s=0.0,
        tenant=Tenant("prod"),
        tier="prod-inference",
        replicas=2,
        devices_per_replica=8,
        selectors=(H100,),
    )
    for day in range(days):
        yield TraceJob(
            key=JobKey(f"inference/llm-prod-scale-up-{day}"),
            arrival_s=round(day * DAY + rng.uniform(10 * HOUR, 14 * HOUR)),
            tenant=Tenant("prod"),
            tier="prod-inference",
            replicas=1,
            devices_per_replica=8,
            runtime_s=round(rng.uniform(3 * HOUR, 6 * HOUR)),
            selectors=(H100,),
        )


def _gangs(
    rng: random.Random, habits: random.Random, stream: GangStream, *, horizon: float
) -> Iterator[TraceJob]:
    """`habits` draws checkpointing apart from `rng`, so arrivals and runs stay the same."""
    arrival = rng.expovariate(1 / stream.mean_interval_s)
    index = 0
    low, high = stream.runtime_s
    while arrival < horizon:
        runtime = round(rng.uniform(low, high))
        band = min(
            int((runtime - low) / (high - low) * FAMILIES_PER_STREAM), FAMILIES_PER_STREAM - 1
        )
        checkpoint = None
        if habits.random() < stream.checkpointing:
            checkpoint = round(habits.uniform(*CHECKPOINT_INTERVAL_S))
        yield TraceJob(
            key=JobKey(f"{stream.tenant}/train-{stream.replicas}x8-{index}"),
            arrival_s=round(arrival),
            tenant=Tenant(stream.tenant),
            tier="training",
            replicas=stream.replicas,
            devices_per_replica=8,
            runtime_s=runtime,
            max_runtime_s=_bound(runtime),
            topology=stream.topology,
            checkpoint_interval_s=checkpoint,
            family=f"train-{stream.replicas}x8-{'abc'[band]}",
        )
        index += 1
        arrival += rng.expovariate(1 / stream.mean_interval_s)


def _small_rate(time_s: float) -> float:
    """Arrivals per second: busy working hours, a quiet night (peak 1.6x, trough 0.4x)."""
    phase = 2 * math.pi * ((time_s % DAY) / DAY - 0.375)
    return (1 + 0.6 * math.sin(phase)) / SMALL_MEAN_INTERVAL_S


def _small(rng: random.Random, *, horizon: float) -> Iterator[TraceJob]:
    """Non-homogeneous Poisson arrivals by thinning against the peak rate."""
    peak = 1.6 / SMALL_MEAN_INTERVAL_S
    tenants = [name for name, _ in SMALL_TENANTS]
    weights = [share for _, share in SMALL_TENANTS]
    arrival = rng.expovariate(peak)
    index = 0
    while arrival < horizon:
        if rng.random() * peak <= _small_rate(arrival):
            tenant = rng.choices(tenants, weights)[0]
            yield TraceJob(
                key=JobKey(f"{tenant}/small-{index}"),
                arrival_s=round(arrival, 1),
                tenant=Tenant(tenant),
                tier="small",
                runtime_s=max(30.0, round(rng.expovariate(1 / SMALL_MEAN_RUNTIME_S))),
                max_runtime_s=SMALL_MAX_RUNTIME_S,
            )
            index += 1
        arrival += rng.expovariate(peak)


def generate(*, seed: int | str, days: int = 7) -> Trace:
    """The reference trace over `days` simulated days; jobs sorted by arrival."""
    horizon = days * DAY
    rng = random.Random(seed)
    habits = random.Random(f"checkpoints-{seed}")
    jobs = list(prod_jobs(rng, days=days))
    for stream in GANG_STREAMS:
        jobs.extend(_gangs(rng, habits, stream, horizon=horizon))
    jobs.extend(_small(rng, horizon=horizon))
    jobs.sort(key=lambda job: (job.arrival_s, job.key))
    return Trace(cluster=CLUSTER, quotas=QUOTAS, jobs=tuple(jobs), horizon_s=horizon)
