"""The scenario of a demo run, read from a folder such as `examples/reference/`.

Owns the shape of `scenario.yaml` (the emulated cluster, steps, the condition each step waits
for, the story roles the summary checks, controller overrides) and loading the Kubernetes
objects each step applies. Every mistake in those files becomes an `InvalidInputError` naming
the file and the field. It must not talk to a cluster or a database.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gangq.queue.config import ControllerSettings, TenantConfig
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kubesim import cluster

SCENARIO_FILE = "scenario.yaml"
TRAINING_JOB_KIND = "TrainingJob"


def default_directory() -> Path:
    """examples/reference, shipped as package data of this package (next to this module)."""
    return Path(__file__).parent / "reference"


class Trigger(BaseModel):
    """Wait until `count` jobs matching `jobs` (`ns/name`, `*` allowed) reached `phase`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jobs: str = Field(min_length=3, pattern=r"^[^/]+/[^/]+$")
    phase: str = Field(pattern=r"^(Queued|Admitted|Running|Succeeded|Failed)$")
    count: int | None = Field(default=None, ge=1)
    """None means every matching job applied so far."""

    def matches(self, key: str) -> bool:
        return fnmatch.fnmatchcase(key, self.jobs)

    def describe(self) -> str:
        many = "" if self.count is None else f"{self.count} of "
        return f"{many}{self.jobs} {self.phase}"


class TaintConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1)
    value: str = ""
    effect: str = Field(default="NoSchedule", pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)$")


class ClusterConfig(BaseModel):
    """The emulated cluster: GPU nodes in racks, the last ones with split GPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    nodes: int = Field(default=8, ge=1, le=64)
    racks: int = Field(default=2, ge=1)
    partitioned_nodes: int = Field(default=0, alias="partitionedNodes", ge=0)
    shared_nodes: int = Field(default=0, alias="sharedNodes", ge=0)
    split_node_taint: TaintConfig | None = Field(default=None, alias="splitNodeTaint")
    """Set on every partitioned and shared node, so that only jobs tolerating it land there
    (the whole GPUs of a partitioned node belong to the whole-GPU class too)."""

    @model_validator(mode="after")
    def _split_nodes_fit(self) -> ClusterConfig:
        if self.partitioned_nodes + self.shared_nodes > self.nodes:
            raise ValueError("partitionedNodes plus sharedNodes must not exceed nodes")
        return self

    def inventory(self) -> cluster.Inventory:
        return cluster.Inventory(
            nodes=self.nodes,
            racks=self.racks,
            partitioned_nodes=self.partitioned_nodes,
            shared_nodes=self.shared_nodes,
        )


class StepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = Field(min_length=1)
    title: str = Field(min_length=1)
    after: Trigger | None = None


class Story(BaseModel):
    """The roles of the reference story; the summary's checks are phrased with them."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    prod: str
    """The long-running job that is scaled up."""
    scaled_replicas: int = Field(alias="scaledReplicas", ge=1)
    blocker: str
    """The gang whose end the waiting job needs."""
    waiting: str
    """The gang that cannot fit at first and must wait whole."""
    backfill: str
    """Pattern of the small jobs expected to backfill."""
    victim_tiers: tuple[str, ...] = Field(alias="victimTiers", min_length=1)
    """The only tiers the scale-up may preempt."""
    one_domain: tuple[str, ...] = Field(default=(), alias="oneDomain")
    """Gangs whose replicas must end up in one topology domain (rack) in this cluster."""
    slices: str | None = None
    """Pattern of the small jobs expected to run on partitions or shares of a GPU."""


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    timeout_seconds: float = Field(alias="timeoutSeconds", gt=0, le=600)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    namespaces: str
    tenants: str
    steps: tuple[StepConfig, ...] = Field(min_length=1)
    story: Story
    controller: dict[str, Any] = Field(default_factory=dict)


class TenantsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tenants: tuple[TenantConfig, ...]


@dataclass(frozen=True, slots=True)
class Step:
    number: int
    file: str
    title: str
    after: Trigger | None
    objects: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    directory: Path
    timeout_s: float
    cluster: ClusterConfig
    namespaces: tuple[dict[str, Any], ...]
    tenants: tuple[TenantConfig, ...]
    steps: tuple[Step, ...]
    story: Story
    controller: dict[str, Any]


def _problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or 'top'}: {e['msg']}" for e in error.errors()
    )


def _documents(path: Path) -> tuple[dict[str, Any], ...]:
    try:
        loaded = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as error:
        raise InvalidInputError(f"scenario file {path}: {error.strerror}") from error
    except yaml.YAMLError as error:
        raise InvalidInputError(f"scenario file {path} is not valid YAML: {error}") from error
    for document in loaded:
        if not isinstance(document, dict):
            raise InvalidInputError(f"scenario file {path}: every document must be a mapping")
    return tuple(loaded)


def _check_objects(path: Path, objects: tuple[dict[str, Any], ...], *, kind: str) -> None:
    for index, document in enumerate(objects):
        metadata = document.get("metadata")
        where = f"scenario file {path}, document {index + 1}"
        if document.get("kind") != kind:
            raise InvalidInputError(f"{where}: kind must be {kind}, got {document.get('kind')!r}")
        if not isinstance(metadata, dict) or not metadata.get("name"):
            raise InvalidInputError(f"{where}: metadata.name is missing")
        if kind == TRAINING_JOB_KIND and not metadata.get("namespace"):
            raise InvalidInputError(f"{where}: metadata.namespace is missing")


def load(directory: Path) -> Scenario:
    """The scenario in `directory`, with every step's objects read and checked."""
    path = directory / SCENARIO_FILE
    documents = _documents(path)
    if len(documents) != 1:
        raise InvalidInputError(f"scenario file {path}: expected one YAML document")
    try:
        parsed = ScenarioFile.model_validate(documents[0])
        tenants = TenantsFile.model_validate(
            (_documents(directory / parsed.tenants) or ({},))[0]
        ).tenants
    except ValidationError as error:
        raise InvalidInputError(f"scenario in {directory}: {_problems(error)}") from error
    unknown = sorted(set(parsed.controller) - set(ControllerSettings.model_fields))
    if unknown:
        raise InvalidInputError(
            f"scenario file {path}: controller has unknown settings {', '.join(unknown)}"
        )
    namespaces = _documents(directory / parsed.namespaces)
    _check_objects(directory / parsed.namespaces, namespaces, kind="Namespace")
    steps = []
    for number, config in enumerate(parsed.steps, start=1):
        objects = _documents(directory / config.file)
        _check_objects(directory / config.file, objects, kind=TRAINING_JOB_KIND)
        steps.append(Step(number, config.file, config.title, config.after, objects))
    return Scenario(
        directory=directory,
        timeout_s=parsed.timeout_seconds,
        cluster=parsed.cluster,
        namespaces=namespaces,
        tenants=tenants,
        steps=tuple(steps),
        story=parsed.story,
        controller=dict(parsed.controller),
    )


def job_key(document: dict[str, Any]) -> str:
    """`namespace/name` of a TrainingJob document (checked by `load`)."""
    return f"{document['metadata']['namespace']}/{document['metadata']['name']}"
