"""scheduling.k8s.io/v1alpha2: Workload and PodGroup rules (alpha gates GenericWorkload and
GangScheduling, corpus section 12).

Owns what the real API server checks and fills in for both kinds: a scheduling policy that is
exactly one of `basic` and `gang` with a positive `minCount`, the immutability of a Workload's
`podGroupTemplates` and of a PodGroup's policy and `disruptionMode`, the fields it always
prints (`schedulingConstraints: null`, `podGroupTemplateRef: null`, `status: {}`), the default
`disruptionMode: Pod`, the `scheduling.k8s.io/podgroup-protection` finalizer of a new PodGroup
and the PodGroupWorkloadExists admission plugin (a 403). Neither kind has a
`metadata.generation`. It must not schedule: `gangscheduling.py` reads these objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import kinds, status
from gangq.queue.kubesim.strategy import Strategy
from gangq.queue.kubesim.validation import meta

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

PROTECTION = "scheduling.k8s.io/podgroup-protection"
"""The finalizer the podgroup-protection controller removes once no active pod names the group."""
DISRUPTION_MODES = ("Pod", "PodGroup")
_POLICIES = ("basic", "gang")
_NONE_OF = "must specify one of: `basic`, `gang`"
_SEVERAL = "must specify exactly one of: `basic`, `gang`"


def _immutable(path: str) -> status.Cause:
    """The real message prints `null`, not the value (corpus 12-04, 12-11)."""
    return status.invalid_value(path, None, "field is immutable")


def policy_causes(path: str, policy: Any) -> list[status.Cause]:
    """One of `basic` and `gang`; a gang needs `minCount` >= 1 (corpus 12-07, 12-08, 12-87)."""
    given = policy if isinstance(policy, dict) else {}
    chosen = [name for name in _POLICIES if given.get(name) is not None]
    causes: list[status.Cause] = []
    if not chosen:
        causes.append(status.invalid_value(path, "", _NONE_OF))
    elif len(chosen) > 1:
        causes.append(status.invalid_value(path, "{" + ", ".join(chosen) + "}", _SEVERAL))
    gang = given.get("gang")
    if isinstance(gang, dict):
        count = gang.get("minCount")
        if not count:
            causes.append(status.required(f"{path}.gang.minCount"))
        elif isinstance(count, int) and count < 1:
            causes.append(
                status.invalid_value(
                    f"{path}.gang.minCount", count, "must be greater than or equal to 1"
                )
            )
    return causes


def min_count(policy: dict[str, Any]) -> int:
    """How many pods a policy needs at once: a gang's minCount, 1 for `basic`."""
    return int((policy.get("gang") or {}).get("minCount") or 1)


class WorkloadStrategy(Strategy):
    tracks_generation = False

    def normalize(self, obj: dict[str, Any]) -> None:
        """`schedulingConstraints` is always printed, and its `topology` dropped without a
        warning while TopologyAwareWorkloadScheduling is off (corpus 12-02, 12-92)."""
        super().normalize(obj)
        spec = obj.get("spec")
        for template in (spec.get("podGroupTemplates") or []) if isinstance(spec, dict) else []:
            if isinstance(template, dict):
                template["schedulingConstraints"] = None

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        templates = (obj.get("spec") or {}).get("podGroupTemplates") or []
        if not templates:
            return [status.required("spec.podGroupTemplates", "must have at least one item")]
        causes: list[status.Cause] = []
        for index, template in enumerate(templates):
            path = f"spec.podGroupTemplates[{index}]"
            if not template.get("name"):
                causes.append(status.required(f"{path}.name"))
            causes += policy_causes(f"{path}.schedulingPolicy", template.get("schedulingPolicy"))
        return causes

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        causes = self.validate_create(new, registry)
        before = (old.get("spec") or {}).get("podGroupTemplates")
        if (new.get("spec") or {}).get("podGroupTemplates") != before:
            causes.append(_immutable("spec.podGroupTemplates"))
        return causes


class PodGroupStrategy(Strategy):
    tracks_generation = False
    empty_structs = (("status",),)

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if PROTECTION not in finalizers:
            obj["metadata"]["finalizers"] = [*finalizers, PROTECTION]
        obj["status"] = {}

    def normalize(self, obj: dict[str, Any]) -> None:
        """`podGroupTemplateRef` is always printed, as `null` when unset, and `disruptionMode`
        defaults to `Pod` on every write, as decoding defaults it (corpus 12-09)."""
        super().normalize(obj)
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("podGroupTemplateRef", None)
            spec["disruptionMode"] = spec.get("disruptionMode") or "Pod"

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        spec = obj.get("spec") or {}
        causes = policy_causes("spec.schedulingPolicy", spec.get("schedulingPolicy"))
        reference = spec.get("podGroupTemplateRef")
        if isinstance(reference, dict):
            workload = reference.get("workload") or {}
            path = "spec.podGroupTemplateRef.workload"
            for key in ("workloadName", "podGroupTemplateName"):
                value = str(workload.get(key) or "")
                if not value:
                    causes.append(status.required(f"{path}.{key}"))
                elif not meta.is_dns_subdomain(value):
                    causes.append(
                        status.invalid_value(f"{path}.{key}", value, meta.DNS_SUBDOMAIN_MESSAGE)
                    )
        mode = spec.get("disruptionMode")
        if mode not in DISRUPTION_MODES:
            causes.append(status.not_supported("spec.disruptionMode", mode, list(DISRUPTION_MODES)))
        return causes

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        causes: list[status.Cause] = []
        for key in ("schedulingPolicy", "podGroupTemplateRef", "resourceClaims"):
            if new_spec.get(key) != old_spec.get(key):
                causes.append(_immutable(f"spec.{key}"))
        if new_spec.get("disruptionMode") != old_spec.get("disruptionMode"):
            causes.append(status.forbidden("spec.disruptionMode"))
        return causes

    def validate_status_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        """Any condition is accepted: nothing checks a client's type or reason (corpus 12-91)."""
        return []

    def admit(self, obj: dict[str, Any], registry: Registry) -> None:
        """PodGroupWorkloadExists: a referenced Workload and its template must exist (403,
        corpus 12-13, 12-90); the policy is not compared with the template's (12-89)."""
        workload = ((obj.get("spec") or {}).get("podGroupTemplateRef") or {}).get("workload")
        if not workload:
            return
        metadata = obj["metadata"]
        name, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
        workload_name = str(workload.get("workloadName"))
        template = str(workload.get("podGroupTemplateName"))
        found = registry.storage.peek(kinds.WORKLOADS.key, namespace, workload_name)
        if found is None:
            detail = f'Workload "{workload_name}" not found'
        elif not any(
            t.get("name") == template
            for t in (found.get("spec") or {}).get("podGroupTemplates") or []
        ):
            detail = f'PodGroupTemplate "{template}" not found in Workload "{workload_name}"'
        else:
            return
        group = kinds.PODGROUPS
        raise status.refused(group.plural, group.group, name, f"PodGroup rejected: {detail}")
