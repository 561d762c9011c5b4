"""Pods: defaults, create/update validation (scheduling gates!), binding and eviction.

Owns the rules the real API server applies to core/v1 Pods that gangq relies on: gates may
only be removed, gates and nodeName exclude each other, a pod's spec is immutable except
images, activeDeadlineSeconds and added tolerations, and binding a gated or bound pod is a
409. `spec.schedulingGroup` (the PodGroup a pod belongs to) is validated when the
GenericWorkload gate is on and, like any field of a disabled gate, silently dropped when it is
off. It must not schedule: `scheduler.py` decides where pods go and calls `bind`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import kinds, status
from gangq.queue.kubesim.clone import clone
from gangq.queue.kubesim.strategy import Strategy
from gangq.queue.kubesim.validation import meta

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
_MUTABLE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)
SPEC_FIELDS = frozenset(
    [
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "containers",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "hostnameOverride",
        "imagePullSecrets",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "os",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "restartPolicy",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "schedulingGroup",
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
        "workloadRef",
    ]
)
_TOP_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def _condition(kind: str, state: str, now: str, **extra: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": state,
        "lastProbeTime": None,
        "lastTransitionTime": now,
        **extra,
    }


def set_condition(pod: dict[str, Any], condition: dict[str, Any]) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            conditions[index] = condition
            return
    conditions.append(condition)


def qos_class(spec: dict[str, Any]) -> str:
    containers = spec.get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(name)
        and (r.get("requests") or {}).get(name, (r.get("limits") or {})[name])
        == (r.get("limits") or {})[name]
        for r in resources
        for name in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


class PodStrategy(Strategy):
    empty_structs = (("spec", "securityContext"),)
    returns_deleted_object = True
    status_applies_metadata = True

    def __init__(self, *, scheduling_groups: bool = False) -> None:
        self.scheduling_groups = scheduling_groups
        """GenericWorkload on: `spec.schedulingGroup` is kept and validated."""

    def prune(self, obj: dict[str, Any]) -> list[str]:
        unknown = [key for key in obj if key not in _TOP_FIELDS]
        spec = obj.get("spec")
        if isinstance(spec, dict) and not self.scheduling_groups:
            # A known field of a disabled gate: dropped without a warning (dropDisabledPodFields).
            spec.pop("schedulingGroup", None)
        if isinstance(spec, dict):
            unknown += [f"spec.{key}" for key in spec if key not in SPEC_FIELDS]
            for key in [key for key in spec if key not in SPEC_FIELDS]:
                del spec[key]
        for key in [key for key in obj if key not in _TOP_FIELDS]:
            del obj[key]
        return sorted(unknown)

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        spec = obj.setdefault("spec", {})
        for container in spec.get("containers") or []:
            image = str(container.get("image", ""))
            container.setdefault("resources", {})
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
            container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        defaults = {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        for key, value in defaults.items():
            spec.setdefault(key, value)
        pod_status: dict[str, Any] = {"phase": "Pending"}
        if spec.get("schedulingGates"):
            pod_status["conditions"] = [
                _condition(
                    "PodScheduled",
                    "False",
                    registry.now(),
                    reason="SchedulingGated",
                    message=GATED_MESSAGE,
                )
            ]
        pod_status["qosClass"] = qos_class(spec)
        obj["status"] = pod_status

    def normalize(self, obj: dict[str, Any]) -> None:
        """Empty gates disappear; the DefaultTolerationSeconds admission plugin re-adds the
        not-ready/unreachable tolerations on every write (corpus 2-52)."""
        super().normalize(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        if "schedulingGates" in spec and not spec["schedulingGates"]:
            del spec["schedulingGates"]
        tolerations = spec.setdefault("tolerations", [])
        for toleration in DEFAULT_TOLERATIONS:
            if not any(t.get("key") == toleration["key"] for t in tolerations):
                tolerations.append(dict(toleration))

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        spec = obj.get("spec") or {}
        causes: list[status.Cause] = []
        containers = spec.get("containers") or []
        if not containers:
            causes.append(status.required("spec.containers"))
        seen: set[str] = set()
        for index, container in enumerate(containers):
            name = str(container.get("name") or "")
            if not name:
                causes.append(status.required(f"spec.containers[{index}].name"))
            elif not meta.is_dns_label(name):
                causes.append(
                    status.invalid_value(
                        f"spec.containers[{index}].name", name, meta.DNS_LABEL_MESSAGE
                    )
                )
            elif name in seen:
                causes.append(status.duplicate(f"spec.containers[{index}].name", name))
            seen.add(name)
            if not container.get("image"):
                causes.append(status.required(f"spec.containers[{index}].image"))
        causes += _gate_causes(spec) + _scheduling_group_causes(spec)
        if spec.get("schedulingGates") and spec.get("nodeName"):
            causes.append(
                status.forbidden(
                    "spec.nodeName", "cannot be set until all schedulingGates have been cleared"
                )
            )
        return causes

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        causes = _gate_causes(new_spec)
        old_gates = {g.get("name") for g in old_spec.get("schedulingGates") or []}
        for index, gate in enumerate(new_spec.get("schedulingGates") or []):
            if gate.get("name") not in old_gates:
                causes.append(
                    status.forbidden(
                        f"spec.schedulingGates[{index}].name",
                        "only deletion is allowed, but found new scheduling gate "
                        f"'{gate.get('name')}'",
                    )
                )
        if causes:
            return causes
        if len(new_spec.get("containers") or []) != len(old_spec.get("containers") or []):
            return [
                status.forbidden("spec.containers", "pod updates may not add or remove containers")
            ]
        if _comparable(new_spec, old_spec) != _comparable(old_spec, old_spec):
            return [status.forbidden("spec", _MUTABLE_MESSAGE)]
        return []

    def validate_status_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        phase = (new.get("status") or {}).get("phase")
        allowed = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
        if phase is not None and phase not in allowed:
            return [status.not_supported("status.phase", phase, list(allowed))]
        return []


def _gate_causes(spec: dict[str, Any]) -> list[status.Cause]:
    causes: list[status.Cause] = []
    seen: set[str] = set()
    for index, gate in enumerate(spec.get("schedulingGates") or []):
        name = str(gate.get("name") or "")
        path = f"spec.schedulingGates[{index}]"
        invalid = meta.qualified_name_causes(path, name)
        if invalid:
            causes += invalid
        elif name in seen:
            causes.append(status.duplicate(path, name))
        seen.add(name)
    return causes


def _scheduling_group_causes(spec: dict[str, Any]) -> list[status.Cause]:
    """A one-of union with a single member (corpus 12-82) naming a DNS subdomain (12-83); it is
    immutable like the rest of the spec (12-78, 12-79, 12-81)."""
    group = spec.get("schedulingGroup")
    if group is None:
        return []
    path = "spec.schedulingGroup.podGroupName"
    name = group.get("podGroupName") if isinstance(group, dict) else None
    if name is None:
        return [status.invalid_value(path, None, "must specify one of: `podGroupName`")]
    if not meta.is_dns_subdomain(str(name)):
        return [status.invalid_value(path, name, meta.DNS_SUBDOMAIN_MESSAGE)]
    return []


def _comparable(spec: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The spec with every field a pod update may change replaced by the old value."""
    result = clone(spec)
    for key in ("activeDeadlineSeconds", "schedulingGates"):
        result.pop(key, None)
    for group in ("containers", "initContainers"):
        for container in result.get(group) or []:
            container.pop("image", None)
    old_tolerations = old.get("tolerations") or []
    new_tolerations = result.pop("tolerations", None) or []
    if all(t in new_tolerations for t in old_tolerations):
        result["tolerations"] = old_tolerations
    else:
        result["tolerations"] = new_tolerations
    return result


def _binding_conflict(name: str, detail: str) -> status.ApiError:
    return status.ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on pods/binding "{name}": {detail}',
        details={"name": name, "kind": "pods/binding"},
    )


def bind(registry: Registry, namespace: str, name: str, node: str) -> dict[str, Any]:
    """POST pods/<name>/binding, as kube-scheduler does it (corpus 2-39..2-43)."""
    pod = registry.get(kinds.PODS, namespace, name)
    spec = pod.setdefault("spec", {})
    if spec.get("schedulingGates"):
        raise _binding_conflict(name, f"pod {name} has non-empty .spec.schedulingGates")
    if spec.get("nodeName"):
        raise _binding_conflict(
            name, f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        )
    if pod["metadata"].get("deletionTimestamp"):
        raise _binding_conflict(name, f"pod {name} is being deleted, cannot be assigned to a host")
    spec["nodeName"] = node
    set_condition(pod, _condition("PodScheduled", "True", registry.now()))
    return registry.commit(kinds.PODS, pod)


def evict(registry: Registry, namespace: str, name: str) -> None:
    """policy/v1 Eviction without PodDisruptionBudgets: a graceful delete."""
    from gangq.queue.kubesim import deletion

    deletion.delete(registry, kinds.PODS, namespace, name, deletion.DeleteOptions())
