"""Tenant quotas per device class: nominal, borrowing limit, weight, allowed tiers (rule 3).

Owns the per-cycle ledger of devices each tenant uses per class, the limit check, how much of
an admission is borrowed, and the weighted dominant share that fair ordering reads. It never
places anything; a tenant without a quota for a class has nominal 0 and borrowing limit 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from gangq.queue.core import explain
from gangq.queue.core.model import PendingJob, RunningJob, Tenant, TenantQuota

_NO_QUOTA_WEIGHT = 1.0


class QuotaBook:
    """Devices in use per (tenant, device class), updated as the cycle admits jobs."""

    def __init__(
        self,
        *,
        quotas: Iterable[TenantQuota],
        running: Iterable[RunningJob],
    ) -> None:
        self._quotas = {(q.tenant, q.device_class): q for q in quotas}
        self._nominal = {key: q.nominal for key, q in self._quotas.items()}
        """Nominal per (tenant, class), read for every job the cycle orders and decides."""
        self._guaranteed: dict[str, int] = {}
        for quota in self._quotas.values():
            self._guaranteed[quota.device_class] = (
                self._guaranteed.get(quota.device_class, 0) + quota.nominal
            )
        self.used: dict[tuple[Tenant, str], int] = {}
        self._shares: dict[Tenant, float] = {}
        self._classes: dict[Tenant, set[str]] = {}
        for quota in self._quotas.values():
            self._classes.setdefault(quota.tenant, set()).add(quota.device_class)
        for job in running:
            key = (job.tenant, job.device_class)
            self.used[key] = self.used.get(key, 0) + job.device_count
        for tenant, device_class in self.used:
            self._classes.setdefault(tenant, set()).add(device_class)

    def quota(self, tenant: Tenant, device_class: str) -> TenantQuota:
        found = self._quotas.get((tenant, device_class))
        return found or TenantQuota(tenant=tenant, device_class=device_class, nominal=0)

    def in_use(self, tenant: Tenant, device_class: str) -> int:
        return self.used.get((tenant, device_class), 0)

    def refusal(self, job: PendingJob) -> explain.PendingReason | None:
        """Why the tenant may not take the job's devices now, or None when it may (rule 3)."""
        key = (job.tenant, job.device_class)
        quota = self.quota(job.tenant, job.device_class)
        if quota.allowed_tiers and job.tier not in quota.allowed_tiers:
            return explain.tier_not_allowed(
                tenant=job.tenant, tier=job.tier, allowed=quota.allowed_tiers
            )
        used = self.used.get(key, 0)
        if used + job.device_count > quota.nominal + quota.borrowing_limit:
            return explain.quota_exceeded(
                tenant=job.tenant,
                used=used,
                nominal=quota.nominal,
                borrowing_limit=quota.borrowing_limit,
                needed=job.device_count,
                device_class=job.device_class,
            )
        return None

    def is_within_nominal(self, tenant: Tenant, device_class: str, count: int) -> bool:
        """The tenant would stay within its nominal quota after taking `count` more devices."""
        key = (tenant, device_class)
        return self.used.get(key, 0) + count <= self._nominal.get(key, 0)

    def borrowed(self, tenant: Tenant, device_class: str, count: int) -> int:
        """How many of `count` more devices would be above nominal (borrowed, reclaimable)."""
        key = (tenant, device_class)
        nominal = self._nominal.get(key, 0)
        used = self.used.get(key, 0)
        return max(0, used + count - nominal) - max(0, used - nominal)

    def charge(self, tenant: Tenant, device_class: str, count: int) -> None:
        key = (tenant, device_class)
        self.used[key] = self.used.get(key, 0) + count
        self._shares.pop(tenant, None)
        self._classes.setdefault(tenant, set()).add(device_class)

    def weighted_share(self, tenant: Tenant) -> float:
        """Dominant share over device classes, each divided by the class weight. A share is
        use over the sum of nominal quotas of the class: the devices tenants are promised."""
        cached = self._shares.get(tenant)
        if cached is not None:
            return cached
        share = 0.0
        for device_class in self._classes.get(tenant, ()):
            total = self._guaranteed.get(device_class, 0)
            used = self.in_use(tenant, device_class)
            if total <= 0 or used <= 0:
                continue
            quota = self._quotas.get((tenant, device_class))
            weight = quota.weight if quota is not None and quota.weight > 0 else _NO_QUOTA_WEIGHT
            share = max(share, used / total / weight)
        self._shares[tenant] = share
        return share
