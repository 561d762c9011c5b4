"""ResourceSlice rules of partitionable devices, consumable capacity and device taints.

Owns what the real API server checks inside one slice (corpus section 10): counter sets and
the devices consuming them (limits, duplicates, one of the two per slice), a capacity's
`requestPolicy` (only on devices that allow multiple allocations; its default, valid values
and valid range), device taints (effect, key, count; `timeAdded` defaulted) and the device
count limits. Like the real server it never cross-checks slices: a counter set named by a
device may live elsewhere or nowhere. It must not allocate.
"""

from __future__ import annotations

import itertools
from typing import Any

from gangq.queue.core import quantity
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kubesim import status
from gangq.queue.kubesim.validation import meta

MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMED_COUNTER_SETS = 2
MAX_TAINTS = 16
EFFECTS = ("NoExecute", "NoSchedule", "None")
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def effect_causes(path: str, effect: Any, *, required: bool) -> list[status.Cause]:
    """A taint's or a toleration's effect: NoExecute, NoSchedule or None."""
    if effect in (None, ""):
        return [status.required(path)] if required else []
    if effect in EFFECTS:
        return []
    return [status.not_supported(path, effect, list(EFFECTS))]


def _milli(text: Any) -> int | None:
    try:
        return quantity.parse_milli(text)
    except InvalidInputError:
        return None


def _format(milli: int, *, like: str) -> str:
    """A sum of quantities printed in the format of one of its terms (binary stays binary)."""
    if milli % 1000 == 0 and any(str(like).endswith(suffix) for suffix, _ in _BINARY):
        units = milli // 1000
        for suffix, size in _BINARY:
            if units and units % size == 0:
                return f"{units // size}{suffix}"
        return str(units)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _range_causes(
    path: str, valid: dict[str, Any], *, capacity: str, default: str | None
) -> list[status.Cause]:
    """validRange: min, max and step against the capacity value and the default, in the order
    and with the values the real server reports (corpus 10-16 and the notes of 10-15)."""
    causes: list[status.Cause] = []
    value, dflt = _milli(capacity), None if default is None else _milli(default)
    low, high, step = valid.get("min"), valid.get("max"), valid.get("step")
    low_m, high_m, step_m = _milli(low), _milli(high), _milli(step)
    if low is None:
        causes.append(status.required(f"{path}.min", "required when validRange is defined"))
    elif low_m is not None and value is not None:
        if low_m > value:
            causes.append(
                status.invalid_value(
                    f"{path}.min", low, f"min is larger than capacity value: {capacity}"
                )
            )
        if dflt is not None and dflt < low_m:
            causes.append(
                status.invalid_value(f"{path}.min", default, f"default is less than min: {low}")
            )
    if high_m is not None and value is not None:
        if low_m is not None and low_m > high_m:
            causes.append(
                status.invalid_value(f"{path}.max", low, f"min is larger than max: {high}")
            )
        if high_m > value:
            causes.append(
                status.invalid_value(
                    f"{path}.max", high, f"max is larger than capacity value: {capacity}"
                )
            )
        if dflt is not None and dflt > high_m:
            causes.append(
                status.invalid_value(f"{path}.max", default, f"default is more than max: {high}")
            )
    if step_m and low_m is not None and value is not None:
        one_step = low_m + step_m
        if one_step > value:
            shown = _format(one_step, like=str(low))
            causes.append(
                status.invalid_value(
                    f"{path}.step",
                    step,
                    f"one step {shown} is larger than capacity value: {capacity}",
                )
            )
        if dflt is not None and (dflt - low_m) % step_m:
            causes.append(
                status.invalid_value(
                    f"{path}.step",
                    default,
                    f"value is not a multiple of a given step ({step}) from ({low})",
                )
            )
    return causes


def _values_causes(path: str, values: list[Any], *, default: str | None) -> list[status.Cause]:
    causes: list[status.Cause] = []
    parsed = [_milli(value) for value in values]
    if any(b is not None and a is not None and b < a for a, b in itertools.pairwise(parsed)):
        causes.append(
            status.invalid_value(path, values, "values must be sorted in ascending order")
        )
    for index, value in enumerate(parsed):
        if value is not None and value in parsed[:index]:
            causes.append(status.duplicate(f"{path}[{index}]", values[index]))
    if default is not None and _milli(default) not in parsed:
        causes.append(
            status.invalid_value(
                path, default, "default value is not valid according to the requestPolicy"
            )
        )
    return causes


def _policy_causes(
    path: str, policy: dict[str, Any], *, capacity: str, shared: bool
) -> list[status.Cause]:
    if not shared:
        return [status.forbidden(path, "allowMultipleAllocations must be true")]
    default = policy.get("default")
    values, valid = policy.get("validValues"), policy.get("validRange")
    if values and valid:
        return [
            status.forbidden(
                path,
                'exactly one policy can be specified, cannot specify "validValues" and '
                '"validRange" at the same time',
            )
        ]
    if values:
        return _values_causes(f"{path}.validValues", list(values), default=default)
    if isinstance(valid, dict):
        causes: list[status.Cause] = []
        if default is None:
            causes.append(status.required(f"{path}.default", "required when validRange is defined"))
        return causes + _range_causes(
            f"{path}.validRange", valid, capacity=str(capacity), default=default
        )
    return []


def _taint_causes(path: str, taints: list[Any]) -> list[status.Cause]:
    causes: list[status.Cause] = []
    if len(taints) > MAX_TAINTS:
        causes.append(status.too_many(path, len(taints), MAX_TAINTS))
    for index, taint in enumerate(taints):
        where = f"{path}[{index}]"
        key = str((taint or {}).get("key") or "")
        if not key:
            causes.append(status.required(f"{where}.key"))
        else:
            causes += meta.qualified_name_causes(f"{where}.key", key)
        causes += effect_causes(f"{where}.effect", (taint or {}).get("effect"), required=True)
    return causes


def _device_causes(path: str, device: dict[str, Any]) -> list[status.Cause]:
    causes: list[status.Cause] = []
    name = str(device.get("name") or "")
    if not meta.is_dns_label(name):
        causes.append(status.invalid_value(f"{path}.name", name, meta.DNS_LABEL_MESSAGE))
    consumed = device.get("consumesCounters") or []
    if len(consumed) > MAX_CONSUMED_COUNTER_SETS:
        causes.append(
            status.too_many(f"{path}.consumesCounters", len(consumed), MAX_CONSUMED_COUNTER_SETS)
        )
    shared = bool(device.get("allowMultipleAllocations"))
    capacity = device.get("capacity") or {}
    for key in sorted(capacity):
        policy = (capacity[key] or {}).get("requestPolicy")
        if isinstance(policy, dict):
            causes += _policy_causes(
                f"{path}.capacity[{key}].requestPolicy",
                policy,
                capacity=str((capacity[key] or {}).get("value")),
                shared=shared,
            )
    return causes + _taint_causes(f"{path}.taints", device.get("taints") or [])


def spec_causes(spec: dict[str, Any]) -> list[status.Cause]:
    """Every check of one slice's spec, in the real server's order."""
    causes: list[status.Cause] = []
    if not spec.get("driver"):
        causes.append(status.required("spec.driver"))
    if not (spec.get("pool") or {}).get("name"):
        causes.append(status.required("spec.pool.name"))
    counter_sets, devices = spec.get("sharedCounters") or [], spec.get("devices") or []
    if counter_sets and devices:
        causes.append(
            status.invalid_value("spec", "", "only one of `sharedCounters` or `devices` is allowed")
        )
    if len(counter_sets) > MAX_COUNTER_SETS:
        causes.append(status.too_many("spec.sharedCounters", len(counter_sets), MAX_COUNTER_SETS))
    names: set[str] = set()
    for index, counter_set in enumerate(counter_sets):
        where = f"spec.sharedCounters[{index}]"
        name = str((counter_set or {}).get("name") or "")
        if name in names:
            causes.append(status.duplicate(where, name))
        names.add(name)
        counters = (counter_set or {}).get("counters") or {}
        if len(counters) > MAX_COUNTERS_PER_SET:
            causes.append(status.too_many(f"{where}.counters", len(counters), MAX_COUNTERS_PER_SET))
    limited = any(d.get("consumesCounters") or d.get("taints") for d in devices)
    limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if limited else MAX_DEVICES
    if len(devices) > limit:
        causes.append(status.too_many("spec.devices", len(devices), limit))
    for index, device in enumerate(devices):
        causes += _device_causes(f"spec.devices[{index}]", device or {})
    return causes


def default_taints(spec: dict[str, Any], *, now: str) -> None:
    """A taint without `timeAdded` gets the time it was written (corpus 10-17)."""
    for device in spec.get("devices") or []:
        for taint in (device or {}).get("taints") or []:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                taint["timeAdded"] = now
