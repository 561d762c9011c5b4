"""Settings of the controller process (`gangq run`, `gangq demo`): environment, then a YAML file.

Owns names, defaults and validation of what an operator configures: the database, how to reach
the cluster, the managed device classes, tiers, topology keys, identity attributes, tenants and
the loop timers. It opens no connection and must not decide policy; `policy()` only hands the
values to the decision core.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gangq.queue.core import model
from gangq.queue.core.errors import InvalidInputError


class TierConfig(BaseModel):
    """One tier of the ordered tier list (PRODUCT §3); a higher rank preempts lower ranks."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1)
    rank: int
    min_runtime_before_preemption_s: float = Field(
        default=0.0, ge=0, alias="minRuntimeBeforePreemptionSeconds"
    )
    """A fresh gang of this tier is not preempted before it ran this long (anti-thrashing),
    except by a tier that always preempts."""
    long_running: bool = Field(default=False, alias="longRunning")
    """Serving tiers never finish by themselves: failed pods restart in place, replicas scale."""
    preemption_delay_s: float = Field(default=0.0, ge=0, alias="preemptionDelaySeconds")
    """A job of this tier evicts nobody (reclaim included) before it has waited this long."""
    always_preempts: bool = Field(default=False, alias="alwaysPreempts")
    """Evicts lower tiers without weighing their lost work against its wait (serving)."""

    @model_validator(mode="before")
    @classmethod
    def _no_reclaim_patience(cls, values: Any) -> Any:
        """Settings written for the fixed reclaim patience must say what replaced it, not just
        that the key is unknown."""
        if isinstance(values, dict) and "reclaimWithinSeconds" in values:
            raise ValueError(
                "reclaimWithinSeconds was removed: a reclaim now evicts once the time its tenant "
                "was kept from its nominal quota has cost what the eviction destroys (ski "
                "rental, docs/sim.md); delete the key"
            )
        return values

    def to_core(self) -> model.Tier:
        return model.Tier(
            self.name,
            self.rank,
            min_runtime_before_preemption_s=self.min_runtime_before_preemption_s,
            long_running=self.long_running,
            preemption_delay_s=self.preemption_delay_s,
            always_preempts=self.always_preempts,
        )


class QuotaConfig(BaseModel):
    """A tenant's share of one device class, in the shape of examples/reference/tenants.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    device_class: str = Field(alias="deviceClass", min_length=1)
    nominal: int = Field(ge=0)
    borrowing_limit: int = Field(default=0, ge=0, alias="borrowingLimit")
    weight: float = Field(default=1.0, gt=0)
    allowed_tiers: tuple[str, ...] = Field(default=(), alias="allowedTiers")


class TenantConfig(BaseModel):
    """A tenant whose quotas the controller writes to the store when it starts leading."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    quotas: tuple[QuotaConfig, ...] = ()

    def to_core(self) -> tuple[model.TenantQuota, ...]:
        return tuple(
            model.TenantQuota(
                tenant=model.Tenant(self.name),
                device_class=quota.device_class,
                nominal=quota.nominal,
                borrowing_limit=quota.borrowing_limit,
                weight=quota.weight,
                allowed_tiers=quota.allowed_tiers,
            )
            for quota in self.quotas
        )


def _default_tiers() -> tuple[TierConfig, ...]:
    return tuple(
        TierConfig.model_validate(
            {
                "name": tier.name,
                "rank": tier.rank,
                "minRuntimeBeforePreemptionSeconds": tier.min_runtime_before_preemption_s,
                "longRunning": tier.long_running,
                "preemptionDelaySeconds": tier.preemption_delay_s,
                "alwaysPreempts": tier.always_preempts,
            }
        )
        for tier in model.DEFAULT_TIERS
    )


class ControllerSettings(BaseSettings):
    """Everything `run_controller` needs besides its connections.

    Environment variables use the prefix `GANGQ_` (`DATABASE_URL` is also read bare); values in
    the YAML file named by `config_file` are used where the environment sets nothing.
    """

    model_config = SettingsConfigDict(
        env_prefix="GANGQ_", extra="ignore", frozen=True, populate_by_name=True
    )

    database_url: str = Field(
        default="", validation_alias=AliasChoices("DATABASE_URL", "GANGQ_DATABASE_URL")
    )
    """PostgreSQL URL; empty means the embedded server (`gangq demo`)."""
    kubeconfig: Path | None = None
    """Kubeconfig file; None means in-cluster config, else the default kubeconfig."""
    config_file: Path | None = None
    """YAML file with any of these fields (snake_case names), plus `tenants`."""
    managed_device_classes: tuple[str, ...] = ("gpu.nvidia.com",)
    """DeviceClasses gangq allocates itself; jobs asking for any other class are invalid."""
    tiers: tuple[TierConfig, ...] = Field(default_factory=_default_tiers)
    """The ordered tiers; default prod-inference (long-running) > training > small."""
    topology_keys: tuple[str, ...] = ("gangq.dev/rack",)
    """Node label keys that define topology domains (rack, zone, NVLink clique)."""
    identity_attributes: dict[str, str] = Field(default_factory=lambda: {"gpu.nvidia.com": "uuid"})
    """Driver -> attribute that names one device for good; claims are pinned to it by CEL."""
    tenants: tuple[TenantConfig, ...] = ()
    """Tenants written to the store when leadership is taken (the API may change them later)."""
    preemption_cost_factor: float = Field(default=model.DEFAULT_PREEMPTION_COST_FACTOR, gt=0)
    """An eviction pays when the victims' lost device-seconds are at most this times what
    waiting has cost the preemptor (rule 6, docs/sim.md)."""
    unsaved_borrow_s: float | None = Field(default=None, gt=0)
    """When set, borrowers without a checkpoint interval leave free the share of other tenants'
    unused nominal quota their expected run is of this many seconds (docs/sim.md); unset: off."""
    serving_forecast_days: int | None = Field(default=7, ge=2)
    """Days of admissions of the tiers that always preempt that their next daily scale-up is
    forecast from, to keep a place cheap to clear before it (docs/sim.md); null: off."""
    pod_groups: Literal["auto", "on", "off"] = "auto"
    """Give every released gang a PodGroup (`scheduling.k8s.io/v1alpha2`), so kube-scheduler
    binds its pods together or not at all: `auto` where the API server serves podgroups, `on`
    refuses to start without them, `off` never (docs/podgroups.md)."""
    pod_group_bind_timeout_s: float = Field(default=30.0, gt=0)
    """A released gang with a PodGroup that kube-scheduler has called unschedulable for this
    long is torn down and queued again: the scheduler retries such a group with no backoff,
    thousands of times a second, until its pods are gone."""
    cycle_interval_s: float = Field(default=5.0, gt=0)
    """Longest pause between two cycles when nothing wakes the loop (polling safety net)."""
    coalesce_s: float = Field(default=0.05, ge=0)
    """Wake-ups within this window are merged into one cycle."""
    min_step_interval_s: float = Field(default=0.5, ge=0)
    """Under a stream of wake-ups, a step starts at most this often (one after a quiet spell
    waits only `coalesce_s`): a job waits up to this long to be admitted, and a step serves
    every job that arrived since the last, for one step's fixed cost."""
    status_refresh_s: float = Field(default=30.0, ge=0)
    """A queued job's status is rewritten for a new position at most this often (a phase
    change is written at once); `GET /v1/jobs` always has the current position."""
    status_reason_interval_s: float = Field(default=2.0, ge=0)
    """A job's new reason is written at once, but at most this often per job, so the status
    soon shows the stored reason, the one `GET /v1/jobs` shows. A return to a kind of wait
    (capacity, quota, backfill...) shown earlier in the same wait is churn, written like a
    queue move: a full cluster swings its waiting jobs between kinds with every ending."""
    status_moves_per_step: int = Field(default=50, ge=1)
    """Of those queue moves, at most this many are written per step (the stalest first)."""
    gauges_interval_s: float = Field(default=5.0, ge=0)
    """The device and tenant gauges of /metrics are recomputed at most this often: summarizing
    every device each step was a tenth of the controller's CPU, and a scrape comes every 15 s+."""
    leader_retry_s: float = Field(default=2.0, gt=0)
    """How often a follower tries to take leadership (bounds the takeover time)."""
    restart_backoff_s: float = Field(default=10.0, ge=0)
    """First backoff of a gang requeued after a failed start; doubles per restart."""
    restart_backoff_max_s: float = Field(default=600.0, ge=0)
    """Upper bound of that backoff."""
    actor: str = "controller"
    """Name written into the history for what this process does."""
    holder: str | None = None
    """Leadership holder name; default `hostname:pid`."""

    def policy(self) -> model.Policy:
        """The decision core's knobs from these settings."""
        return model.Policy(
            tiers=tuple(tier.to_core() for tier in self.tiers),
            managed_device_classes=self.managed_device_classes,
            topology_keys=self.topology_keys,
            preemption_cost_factor=self.preemption_cost_factor,
            unsaved_borrow_s=self.unsaved_borrow_s,
            serving_forecast_days=self.serving_forecast_days,
        )

    def tier(self, name: str) -> TierConfig | None:
        return next((tier for tier in self.tiers if tier.name == name), None)


def _environment() -> ControllerSettings:
    try:
        return ControllerSettings()
    except ValidationError as error:
        raise InvalidInputError(f"controller settings from the environment: {error}") from error


def load(config_file: Path | None = None, **overrides: Any) -> ControllerSettings:
    """Settings from the environment, the YAML file (explicit or `GANGQ_CONFIG_FILE`) and
    `overrides` (highest); a malformed file is an `InvalidInputError` naming the problem."""
    environment = _environment()
    path = config_file or environment.config_file
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as error:
            raise InvalidInputError(f"config file {path}: {error}") from error
        if loaded is not None and not isinstance(loaded, dict):
            raise InvalidInputError(f"config file {path}: expected a mapping at the top")
        values = {**(loaded or {}), "config_file": path}
    explicit = {name: getattr(environment, name) for name in environment.model_fields_set}
    try:
        return ControllerSettings(**{**values, **explicit, **overrides})
    except ValidationError as error:
        raise InvalidInputError(f"controller settings: {error}") from error
