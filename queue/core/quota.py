"""Tenant quotas per device class: nominal, borrowing limit, weight, allowed tiers (rule 3).

Owns the per-cycle ledger of what each tenant uses per class, the limit check, how much of an
admission is borrowed, and the weighted dominant share that fair ordering reads. It never
places anything; a tenant without a quota for a class has nominal 0 and borrowing limit 0.
Quotas are whole GPU-equivalents; use is counted in thousandths of one (a 1g.10gb partition of
a 7-slice GPU is 143, a quarter share 250, a whole GPU 1000), so whole-GPU figures are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gangq.queue.core import explain
from gangq.queue.core.model import PendingJob, RunningJob, Tenant, TenantQuota
from gangq.queue.core.sharing import WHOLE, Equivalent, format_equivalent

_NO_QUOTA_WEIGHT = 1.0


class QuotaBook:
    """GPU-equivalents in use per (tenant, device class), in thousandths, updated as the cycle
    admits jobs. Amounts passed in and out are thousandths too."""

    def __init__(
        self,
        *,
        quotas: Iterable[TenantQuota],
        running: Iterable[RunningJob],
        weigh: Callable[[RunningJob], Equivalent] | None = None,
    ) -> None:
        """`weigh` says what a gang holds in thousandths (partitions, shares); None: every
        device is whole."""
        self._quotas = {(q.tenant, q.device_class): q for q in quotas}
        self._nominal = {key: q.nominal * WHOLE for key, q in self._quotas.items()}
        """Nominal per (tenant, class), read for every job the cycle orders and decides."""
        self._guaranteed: dict[str, int] = {}
        for quota in self._quotas.values():
            self._guaranteed[quota.device_class] = (
                self._guaranteed.get(quota.device_class, 0) + quota.nominal
            )
        self.used: dict[tuple[Tenant, str], Equivalent] = {}
        self._shares: dict[Tenant, float] = {}
        self._classes: dict[Tenant, set[str]] = {}
        for quota in self._quotas.values():
            self._classes.setdefault(quota.tenant, set()).add(quota.device_class)
        for job in running:
            key = (job.tenant, job.device_class)
            held = weigh(job) if weigh is not None else job.device_count * WHOLE
            self.used[key] = self.used.get(key, 0) + held
        for tenant, device_class in self.used:
            self._classes.setdefault(tenant, set()).add(device_class)

    def quota(self, tenant: Tenant, device_class: str) -> TenantQuota:
        found = self._quotas.get((tenant, device_class))
        return found or TenantQuota(tenant=tenant, device_class=device_class, nominal=0)

    def in_use(self, tenant: Tenant, device_class: str) -> int:
        """Whole GPU-equivalents in use, a started one counting whole (owed demand counts
        devices)."""
        return int(-(-self.used.get((tenant, device_class), 0) // WHOLE))

    def refusal(self, job: PendingJob) -> explain.PendingReason | None:
        """Why the tenant may not take the job's devices now, or None when it may (rule 3)."""
        key = (job.tenant, job.device_class)
        quota = self.quota(job.tenant, job.device_class)
        if quota.allowed_tiers and job.tier not in quota.allowed_tiers:
            return explain.tier_not_allowed(
                tenant=job.tenant, tier=job.tier, allowed=quota.allowed_tiers
            )
        used = self.used.get(key, 0)
        if used + job.equivalent_milli > (quota.nominal + quota.borrowing_limit) * WHOLE:
            return explain.quota_exceeded(
                tenant=job.tenant,
                used=format_equivalent(used),
                nominal=quota.nominal,
                borrowing_limit=quota.borrowing_limit,
                needed=format_equivalent(job.equivalent_milli),
                device_class=job.device_class,
            )
        return None

    def is_within_nominal(self, tenant: Tenant, device_class: str, count: Equivalent) -> bool:
        """The tenant would stay within its nominal quota after taking `count` more."""
        key = (tenant, device_class)
        return self.used.get(key, 0) + count <= self._nominal.get(key, 0)

    def borrowed(self, tenant: Tenant, device_class: str, count: Equivalent) -> Equivalent:
        """How much of `count` more would be above nominal (borrowed, reclaimable)."""
        key = (tenant, device_class)
        nominal = self._nominal.get(key, 0)
        used = self.used.get(key, 0)
        return max(0, used + count - nominal) - max(0, used - nominal)

    def unused_nominal(self, device_class: str, *, besides: Tenant) -> int:
        """Whole devices of the class other tenants may still take within their nominal
        quota: what a reclaim could take back from borrowers at any time (rule 6)."""
        unused = 0
        for (tenant, quota_class), quota in self._quotas.items():
            if quota_class == device_class and tenant != besides:
                unused += max(0, quota.nominal - self.in_use(tenant, device_class))
        return unused

    def charge(self, tenant: Tenant, device_class: str, count: Equivalent) -> None:
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
            total = self._guaranteed.get(device_class, 0) * WHOLE
            used = self.in_use(tenant, device_class)
            if total <= 0 or used <= 0:
                continue
            quota = self._quotas.get((tenant, device_class))
            weight = quota.weight if quota is not None and quota.weight > 0 else _NO_QUOTA_WEIGHT
            share = max(share, used / total / weight)
        self._shares[tenant] = share
        return share
