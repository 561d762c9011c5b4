"""The trace format: a cluster, tenant quotas and timed job arrivals (see docs/sim.md).

Owns reading a trace from YAML or JSON lines into frozen values, with errors that name the
line or job and the field to fix. It does not simulate anything and does not know policies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import (
    DEFAULT_RESTART_S,
    DEFAULT_TIERS,
    JobKey,
    Tenant,
    TenantQuota,
    Topology,
    TopologyMode,
)

TIER_NAMES = tuple(tier.name for tier in DEFAULT_TIERS)
SLICE_PROFILES = {"1g.10gb": (10, 1, 7), "2g.20gb": (20, 2, 3), "3g.40gb": (40, 3, 2)}
"""Partition profile -> (memory GiB, compute slices, partitions per GPU) of a 7-slice 80 GiB
GPU, as NVIDIA's DRA driver publishes MIG devices of an H100 80GB."""
DEFAULT_STARTUP_TIMEOUT_S = 600.0
NO_TOPOLOGY = Topology()


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Identical GPU nodes spread evenly over racks; devices split evenly over NUMA nodes."""

    nodes: int = 8
    racks: int = 2
    devices_per_node: int = 8
    numa_per_node: int = 2
    product_name: str = "NVIDIA H100 80GB HBM3"
    device_class: str = "gpu.nvidia.com"
    partitioned_nodes: int = 0
    """The first nodes also publish each GPU as MIG-like partitions (`SLICE_PROFILES`), all
    consuming the GPU's shared counters: slice jobs run there."""

    @property
    def capacity(self) -> int:
        return self.nodes * self.devices_per_node


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One arrival. `runtime_s` None runs until the horizon; the job stops at `max_runtime_s`."""

    key: JobKey
    arrival_s: float
    tenant: Tenant
    tier: str
    replicas: int = 1
    devices_per_replica: int = 1
    runtime_s: float | None = None
    max_runtime_s: float | None = None
    priority: int = 0
    selectors: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    topology: Topology = NO_TOPOLOGY
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    checkpoint_interval_s: float | None = None
    """The job saves a checkpoint this often while it runs; an eviction loses only the work
    since the last one and the job resumes from it. None: it never checkpoints."""
    restart_s: float = DEFAULT_RESTART_S
    """What each restart after an eviction takes (loading the checkpoint, re-forming the
    gang): the job holds its devices that long before its work resumes."""
    family: str | None = None
    """Runs of one family are alike (prediction history); None: the name without its
    numeric suffix (`prediction.family_of`)."""
    checkpoint_grace_s: float | None = None
    """`spec.preemption.checkpointGraceSeconds`: asked for a checkpoint before an eviction
    and evicted after it answers or this grace ends; None: evicted at once."""
    slice: str | None = None
    """A slice job: its devices are partitions of this profile (`SLICE_PROFILES`), not GPUs."""
    min_replicas: int | None = None
    """`spec.elastic.minReplicas`: an elastic job may start at any size from this to
    `replicas`; its `runtime_s` is its run at `replicas`, its work device-seconds
    (`elastic.runtime_at`). None: it runs at `replicas` only."""

    @property
    def device_count(self) -> int:
        return self.replicas * self.devices_per_replica

    @property
    def least_replicas(self) -> int:
        """The fewest replicas it may start with."""
        return self.replicas if self.min_replicas is None else self.min_replicas

    @property
    def gpus(self) -> float:
        """GPU-equivalents it holds when running: a partition counts its largest share of the
        GPU's counters (memory or compute slices), as quotas count it."""
        if self.slice is None:
            return float(self.device_count)
        memory, slices, _ = SLICE_PROFILES[self.slice]
        return self.device_count * max(memory / 80, slices / 7)

    @property
    def shape(self) -> str:
        """`replicas x devices`, the gang size waits are grouped by."""
        return f"{self.replicas}x{self.devices_per_replica}"

    @property
    def run_s(self) -> float | None:
        """How long the job holds its devices once started (rule 5: stopped at its bound)."""
        if self.runtime_s is None:
            return self.max_runtime_s
        if self.max_runtime_s is None:
            return self.runtime_s
        return min(self.runtime_s, self.max_runtime_s)


@dataclass(frozen=True, slots=True)
class Trace:
    cluster: ClusterSpec
    quotas: tuple[TenantQuota, ...]
    jobs: tuple[TraceJob, ...]
    horizon_s: float

    @property
    def tenants(self) -> tuple[Tenant, ...]:
        return tuple(quota.tenant for quota in self.quotas)

    def without_elastic(self) -> Trace:
        """The same arrivals with every job's `minReplicas` removed, each run at `replicas`
        only: the same week replayed without elasticity, to see what it changes."""
        return replace(self, jobs=tuple(replace(job, min_replicas=None) for job in self.jobs))


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class _Cluster(_Model):
    nodes: int = pydantic.Field(8, gt=0, le=10_000)
    racks: int = pydantic.Field(2, gt=0)
    devices_per_node: int = pydantic.Field(8, gt=0, le=1024, alias="devicesPerNode")
    numa_per_node: int = pydantic.Field(2, gt=0, alias="numaPerNode")
    product_name: str = pydantic.Field("NVIDIA H100 80GB HBM3", alias="productName")
    device_class: str = pydantic.Field("gpu.nvidia.com", min_length=1, alias="deviceClass")
    partitioned_nodes: int = pydantic.Field(0, ge=0, alias="partitionedNodes")


class _Tenant(_Model):
    name: str = pydantic.Field(min_length=1)
    nominal: int = pydantic.Field(ge=0)
    borrowing_limit: int = pydantic.Field(0, ge=0, alias="borrowingLimit")
    weight: float = pydantic.Field(1.0, gt=0)
    allowed_tiers: tuple[Literal["prod-inference", "training", "small"], ...] = pydantic.Field(
        (), alias="allowedTiers"
    )


class _Topology(_Model):
    key: str = pydantic.Field(min_length=1)
    mode: Literal["Required", "Preferred"] = "Preferred"


class _Job(_Model):
    name: str | None = pydantic.Field(
        None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    arrival: float = pydantic.Field(ge=0, allow_inf_nan=False)
    tenant: str = pydantic.Field(min_length=1)
    tier: Literal["prod-inference", "training", "small"]
    replicas: int = pydantic.Field(1, gt=0, le=10_000)
    devices_per_replica: int = pydantic.Field(1, gt=0, le=1024, alias="devicesPerReplica")
    runtime: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False)
    max_runtime: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False, alias="maxRuntime")
    priority: int = 0
    selectors: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    topology: _Topology | None = None
    startup_timeout: float = pydantic.Field(
        DEFAULT_STARTUP_TIMEOUT_S, gt=0, allow_inf_nan=False, alias="startupTimeout"
    )
    checkpoint_interval: float | None = pydantic.Field(
        None, gt=0, allow_inf_nan=False, alias="checkpointInterval"
    )
    restart: float = pydantic.Field(
        DEFAULT_RESTART_S, ge=0, allow_inf_nan=False, alias="restartSeconds"
    )
    family: str | None = pydantic.Field(None, min_length=1)
    checkpoint_grace: float | None = pydantic.Field(
        None, ge=0, le=3600, allow_inf_nan=False, alias="checkpointGraceSeconds"
    )
    slice: Literal["1g.10gb", "2g.20gb", "3g.40gb"] | None = None
    min_replicas: int | None = pydantic.Field(None, gt=0, le=10_000, alias="minReplicas")


class _Header(_Model):
    horizon: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False)
    cluster: _Cluster = pydantic.Field(default_factory=lambda: _Cluster.model_validate({}))
    tenants: tuple[_Tenant, ...] = ()


def _describe(error: pydantic.ValidationError, *, where: str) -> str:
    problems = []
    for detail in error.errors():
        field = ".".join(str(part) for part in detail["loc"])
        problems.append(f"{field}: {detail['msg']}" if field else detail["msg"])
    return f"{where}: " + "; ".join(problems)


def _validated(model: type[_Model], raw: Any, *, where: str) -> Any:
    if not isinstance(raw, Mapping):
        raise InvalidInputError(f"{where}: expected a mapping, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as error:
        raise InvalidInputError(_describe(error, where=where)) from error


def _job(raw: _Job, *, index: int) -> TraceJob:
    topology = Topology()
    if raw.topology is not None:
        topology = Topology(key=raw.topology.key, mode=TopologyMode(raw.topology.mode))
    return TraceJob(
        key=JobKey(raw.name or f"{raw.tenant}/job-{index:06d}"),
        arrival_s=raw.arrival,
        tenant=Tenant(raw.tenant),
        tier=raw.tier,
        replicas=raw.replicas,
        devices_per_replica=raw.devices_per_replica,
        runtime_s=raw.runtime,
        max_runtime_s=raw.max_runtime,
        priority=raw.priority,
        selectors=raw.selectors,
        constraints=raw.constraints,
        topology=topology,
        startup_timeout_s=raw.startup_timeout,
        checkpoint_interval_s=raw.checkpoint_interval,
        restart_s=raw.restart,
        family=raw.family,
        checkpoint_grace_s=raw.checkpoint_grace,
        slice=raw.slice,
        min_replicas=raw.min_replicas,
    )


def _assemble(header: _Header, jobs: Iterable[TraceJob], *, source: str) -> Trace:
    cluster = ClusterSpec(
        nodes=header.cluster.nodes,
        racks=header.cluster.racks,
        devices_per_node=header.cluster.devices_per_node,
        numa_per_node=header.cluster.numa_per_node,
        product_name=header.cluster.product_name,
        device_class=header.cluster.device_class,
        partitioned_nodes=header.cluster.partitioned_nodes,
    )
    if cluster.partitioned_nodes > cluster.nodes:
        raise InvalidInputError(
            f"{source}: cluster.partitionedNodes {cluster.partitioned_nodes} > nodes "
            f"{cluster.nodes}"
        )
    if cluster.racks > cluster.nodes:
        raise InvalidInputError(f"{source}: cluster.racks {cluster.racks} > nodes {cluster.nodes}")
    quotas = tuple(
        TenantQuota(
            tenant=Tenant(t.name),
            device_class=cluster.device_class,
            nominal=t.nominal,
            borrowing_limit=t.borrowing_limit,
            weight=t.weight,
            allowed_tiers=t.allowed_tiers,
        )
        for t in header.tenants
    )
    ordered = tuple(sorted(jobs, key=lambda job: (job.arrival_s, job.key)))
    if not ordered:
        raise InvalidInputError(f"{source}: the trace has no jobs")
    if not quotas:
        quotas = _unlimited(ordered, cluster=cluster)
    _check_jobs(ordered, cluster=cluster, quotas=quotas, source=source)
    horizon = header.horizon or _natural_horizon(ordered)
    return Trace(cluster=cluster, quotas=quotas, jobs=ordered, horizon_s=horizon)


def _unlimited(jobs: Iterable[TraceJob], *, cluster: ClusterSpec) -> tuple[TenantQuota, ...]:
    """A trace without tenants: every tenant may use the whole cluster (no quota limits)."""
    tenants = sorted({job.tenant for job in jobs})
    return tuple(
        TenantQuota(tenant=t, device_class=cluster.device_class, nominal=cluster.capacity)
        for t in tenants
    )


def _check_jobs(
    jobs: Iterable[TraceJob],
    *,
    cluster: ClusterSpec,
    quotas: tuple[TenantQuota, ...],
    source: str,
) -> None:
    """Refuse jobs that could never start, so a replay does not silently report them as waits."""
    by_tenant = {quota.tenant: quota for quota in quotas}
    seen: set[JobKey] = set()
    for job in jobs:
        where = f"{source}: job {job.key}"
        if job.key in seen:
            raise InvalidInputError(f"{where}: the name appears twice")
        seen.add(job.key)
        quota = by_tenant.get(job.tenant)
        if quota is None:
            raise InvalidInputError(f"{where}: tenant {job.tenant} is not in 'tenants'")
        if quota.allowed_tiers and job.tier not in quota.allowed_tiers:
            raise InvalidInputError(f"{where}: tenant {job.tenant} may not use tier {job.tier}")
        if job.slice is not None and (job.replicas > 1 or not cluster.partitioned_nodes):
            raise InvalidInputError(
                f"{where}: a slice job has one replica and needs cluster.partitionedNodes"
            )
        if job.least_replicas > job.replicas:
            raise InvalidInputError(
                f"{where}: minReplicas {job.least_replicas} is more than replicas {job.replicas}"
            )
        # an elastic job could start at its minimum
        least, per_replica = job.least_replicas, job.devices_per_replica
        if least * per_replica > quota.nominal + quota.borrowing_limit:
            raise InvalidInputError(
                f"{where}: needs {least * per_replica} devices, tenant {job.tenant} may use at "
                f"most {quota.nominal + quota.borrowing_limit}"
            )
        if per_replica > cluster.devices_per_node or least > cluster.nodes:
            raise InvalidInputError(
                f"{where}: {least}x{per_replica} does not fit {cluster.nodes} nodes x "
                f"{cluster.devices_per_node} devices"
            )


def _natural_horizon(jobs: Iterable[TraceJob]) -> float:
    """Without an explicit horizon: until the last finite job could end if started on arrival."""
    ends = [job.arrival_s + (job.run_s or 0.0) for job in jobs]
    return max(*ends, 1.0)


def from_document(document: Any, *, source: str = "trace") -> Trace:
    """A trace from a parsed YAML document: a mapping with `cluster`, `tenants`, `jobs`."""
    if not isinstance(document, Mapping):
        raise InvalidInputError(f"{source}: expected a mapping with a 'jobs' list")
    raw_jobs = document.get("jobs")
    if not isinstance(raw_jobs, list):
        raise InvalidInputError(f"{source}: 'jobs' must be a list")
    header_fields = {key: value for key, value in document.items() if key != "jobs"}
    header = _validated(_Header, header_fields, where=source)
    jobs = [
        _job(_validated(_Job, raw, where=f"{source}: jobs[{index}]"), index=index)
        for index, raw in enumerate(raw_jobs)
    ]
    return _assemble(header, jobs, source=source)


def from_json_lines(lines: Iterable[str], *, source: str = "trace") -> Trace:
    """One JSON object a line: jobs, and optionally a first line that is the header."""
    header = _Header.model_validate({})
    jobs: list[TraceJob] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}: line {number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidInputError(f"{where}: not JSON ({error.msg})") from error
        if isinstance(raw, Mapping) and "arrival" not in raw and not jobs:
            header = _validated(_Header, raw, where=where)
            continue
        jobs.append(_job(_validated(_Job, raw, where=where), index=len(jobs)))
    return _assemble(header, jobs, source=source)


def load(path: Path) -> Trace:
    """Read `.jsonl`/`.ndjson` as JSON lines and anything else as YAML."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInputError(f"{source}: cannot read ({error.strerror})") from error
    if path.suffix in (".jsonl", ".ndjson"):
        return from_json_lines(text.splitlines(), source=source)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InvalidInputError(f"{source}: not YAML ({error})") from error
    return from_document(document, source=source)


def to_document(trace: Trace) -> dict[str, Any]:
    """The YAML document of a trace, so a generated trace can be saved, edited and replayed."""
    cluster = trace.cluster
    return {
        "horizon": trace.horizon_s,
        "cluster": {
            "nodes": cluster.nodes,
            "racks": cluster.racks,
            "devicesPerNode": cluster.devices_per_node,
            "numaPerNode": cluster.numa_per_node,
            "productName": cluster.product_name,
            "deviceClass": cluster.device_class,
        },
        "tenants": [
            {
                "name": q.tenant,
                "nominal": q.nominal,
                "borrowingLimit": q.borrowing_limit,
                "weight": q.weight,
                "allowedTiers": list(q.allowed_tiers),
            }
            for q in trace.quotas
        ],
        "jobs": [_job_document(job) for job in trace.jobs],
    }


def _job_document(job: TraceJob) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": job.key,
        "arrival": job.arrival_s,
        "tenant": job.tenant,
        "tier": job.tier,
        "replicas": job.replicas,
        "devicesPerReplica": job.devices_per_replica,
    }
    optional: dict[str, Any] = {
        "runtime": job.runtime_s,
        "maxRuntime": job.max_runtime_s,
        "priority": job.priority or None,
        "selectors": list(job.selectors) or None,
        "constraints": list(job.constraints) or None,
        "checkpointInterval": job.checkpoint_interval_s,
        "checkpointGraceSeconds": job.checkpoint_grace_s,
        "family": job.family,
        "minReplicas": job.min_replicas,
    }
    document.update({key: value for key, value in optional.items() if value is not None})
    if job.topology.mode is not TopologyMode.NONE:
        document["topology"] = {"key": job.topology.key, "mode": job.topology.mode.value}
    if job.startup_timeout_s != DEFAULT_STARTUP_TIMEOUT_S:
        document["startupTimeout"] = job.startup_timeout_s
    if job.restart_s != DEFAULT_RESTART_S:
        document["restartSeconds"] = job.restart_s
    return document
