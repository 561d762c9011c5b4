"""CEL device selectors (DeviceClass and job selectors), evaluated with a real CEL engine.

Owns compilation, the DRA variable layout (`device.driver`, `device.attributes["domain"].name`,
`device.capacity["domain"].name`) and the quantity/semver functions selectors use. Evaluation
costs tens of microseconds per device, so `DeviceMatcher` remembers each (expression, device)
result and recomputes only when the device itself changed (a new ResourceSlice) or the
expression is new (a new DeviceClass or job). Devices alike in what an expression reads share
one evaluation (`Reads`): a fleet's thousands of GPUs differ in their uuid and index, which
selectors seldom read. It must not decide anything about placement.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cel

from gangq.queue.core import quantity
from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.errors import InvalidInputError, SelectorError


def _split(name: str) -> tuple[str, str]:
    domain, _, short = name.rpartition("/")
    return domain, short


def device_variables(device: Device) -> dict[str, Any]:
    """The `device` variable as DRA defines it: attributes and capacity grouped by domain."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device.attributes.items():
        domain, short = _split(name)
        attributes.setdefault(domain, {})[short] = value
    capacity: dict[str, dict[str, int]] = {}
    for name, milli in device.capacity.items():
        domain, short = _split(name)
        capacity.setdefault(domain, {})[short] = milli
    return {
        "driver": device.driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": False,
    }


def _semver_key(text: str) -> tuple[int, ...]:
    core = text.split("-", 1)[0].split("+", 1)[0]
    try:
        return tuple(int(part) for part in core.split("."))
    except ValueError as error:
        raise InvalidInputError(f"{text!r} is not a semantic version") from error


def _compare(left: Any, right: Any) -> int:
    """compareTo for quantities (held as thousandths) and for semantic versions (strings)."""
    if isinstance(left, str) and isinstance(right, str):
        a, b = _semver_key(left), _semver_key(right)
    else:
        a, b = left, right
    return int(a > b) - int(a < b)


def _quantity(text: str) -> int:
    return quantity.parse_milli(str(text))


def _semver(text: str) -> str:
    _semver_key(text)
    return text


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "semver": _semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "add": lambda a, b: a + (b if isinstance(b, int) else 0),
    "sub": lambda a, b: a - (b if isinstance(b, int) else 0),
    "sign": lambda a: int(a > 0) - int(a < 0),
    "isInteger": lambda a: a % 1000 == 0,
    "asInteger": lambda a: a // 1000,
    "asApproximateFloat": lambda a: a / 1000,
}

_FIELD = re.compile(
    r"""\bdevice\s*\.\s*(?:
        (?P<table>attributes|capacity)\s*\[\s*(?:"(?P<dq>[^"\\]*)"|'(?P<sq>[^'\\]*)')\s*\]
        \s*\.\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()
      | (?P<plain>driver|allowMultipleAllocations)\b(?!\s*\())""",
    re.VERBOSE,
)
"""`device.attributes["domain"].name`, `device.capacity['domain'].name`, `device.driver`."""
_DEVICE = re.compile(r"\bdevice\b")
_ABSENT_DOMAIN = ("absent", "domain")
_ABSENT_NAME = ("absent", "name")

Field = tuple[str, str, str]
"""(`attributes`, `capacity` or the plain field, domain, name): what an expression reads."""


@dataclass(frozen=True, slots=True)
class Reads:
    """The device fields an expression reads, all by literal names: its result is a function
    of their values (and of whether each domain and name is there), so devices alike in them
    share it."""

    fields: frozenset[Field]
    lookups: tuple[Lookup, ...] = field(compare=False)
    """Per field read: its table (or `driver`), its qualified name and its domain, sorted;
    built once, as `values` runs for every device of a new inventory."""

    @classmethod
    def reading(cls, fields: Iterable[Field]) -> Reads:
        found = frozenset(fields)
        lookups = tuple(
            sorted(
                (table, f"{domain}/{name}", domain)
                for table, domain, name in found
                if table != "allowMultipleAllocations"  # the same for every device
            )
        )
        return cls(found, lookups)

    @classmethod
    def of(cls, expression: str) -> Reads | None:
        """None when the expression reads the device any other way (a whole domain map, an
        index by a computed name, a macro over attributes): then each device is evaluated."""
        if _DEVICE.search(_FIELD.sub(" ", expression)):
            return None
        return cls.reading(
            (
                match["table"] or match["plain"],
                match["dq"] if match["dq"] is not None else match["sq"] or "",
                match["name"] or "",
            )
            for match in _FIELD.finditer(expression)
        )

    def values(self, device: Device) -> tuple[object, ...]:
        """What the expression sees of the device."""
        return tuple(read_value(lookup, device) for lookup in self.lookups)


Lookup = tuple[str, str, str]
"""One field as `Reads` looks it up: its table (or `driver`), qualified name and domain."""


def read_value(lookup: Lookup, device: Device) -> object:
    """What an expression sees of one field of the device."""
    table, qualified, domain = lookup
    if table == "driver":
        return device.driver
    named: Mapping[str, object] = device.attributes if table == "attributes" else device.capacity
    value = named.get(qualified, _ABSENT_NAME)
    if value is _ABSENT_NAME and not any(key.rpartition("/")[0] == domain for key in named):
        value = _ABSENT_DOMAIN
    return value


_Accepted = tuple[Mapping[DeviceId, Device], tuple[Device, ...], frozenset[DeviceId]]
"""The devices mapping a selector tuple was asked of, the devices it accepted and their ids."""


@dataclass(frozen=True, slots=True)
class _Partition:
    """The placed devices of one inventory grouped by the values one `Reads` takes: selector
    tuples reading those fields are answered once per group, and their members and per-node
    counts are made of whole groups."""

    devices: Mapping[DeviceId, Device]
    placed: list[tuple[DeviceId, Device]]
    values: list[tuple[object, ...]]
    """What the fields read are for each of `placed`, in its order."""
    firsts: dict[tuple[object, ...], Device]
    """Per group, its first device: the one the group's answer is evaluated on."""
    untainted: dict[tuple[object, ...], dict[str, int]]
    """Per group, its untainted devices per node."""

    @classmethod
    def of(
        cls,
        devices: Mapping[DeviceId, Device],
        placed: list[tuple[DeviceId, Device]],
        values: list[tuple[object, ...]],
    ) -> _Partition:
        firsts: dict[tuple[object, ...], Device] = {}
        untainted: dict[tuple[object, ...], dict[str, int]] = {}
        for (_, device), seen in zip(placed, values, strict=True):
            per_node = untainted.get(seen)
            if per_node is None:
                firsts[seen] = device
                per_node = untainted[seen] = {}
            if not device.is_tainted and device.node is not None:
                per_node[device.node] = per_node.get(device.node, 0) + 1
        return cls(devices, placed, values, firsts, untainted)

    def members(self, matching: list[tuple[object, ...]]) -> list[tuple[DeviceId, Device]]:
        """The placed devices of the `matching` groups, in the inventory's order."""
        if len(matching) == len(self.firsts):
            return self.placed
        if not matching:
            return []
        keep = set(matching)
        return [pair for pair, seen in zip(self.placed, self.values, strict=True) if seen in keep]


def compile_selector(expression: str) -> cel.Program:
    """Compile once; a syntax error names the expression and the problem."""
    try:
        return cel.compile(expression)
    except ValueError as error:
        problem = str(error).replace(f"Failed to parse expression {expression!r}: ", "")
        raise SelectorError(expression, problem.strip()) from error


@dataclass(slots=True)
class DeviceMatcher:
    """Memoizing evaluator shared by every cycle of one process (results are deterministic)."""

    _programs: dict[str, cel.Program] = field(default_factory=dict)
    _reads: dict[tuple[str, ...], Reads | None] = field(default_factory=dict)
    _shared: dict[tuple[tuple[str, ...], tuple[object, ...]], bool] = field(default_factory=dict)
    """Results by expressions (one, or all of a selector tuple) and the values they read
    (`Reads`), for devices alike in them."""
    evaluations: int = 0
    """CEL programs run so far: what the caches spare shows here."""
    _variables: dict[DeviceId, tuple[Device, dict[str, Any]]] = field(default_factory=dict)
    _results: dict[tuple[str, DeviceId], tuple[Device, bool]] = field(default_factory=dict)
    _combined: dict[tuple[str, ...], dict[DeviceId, tuple[Device, bool]]] = field(
        default_factory=dict
    )
    """All-selector answers per selector tuple, then per device: the inner lookup by id
    alone spares a key tuple per device."""
    _members: dict[tuple[str, ...], _Accepted] = field(default_factory=dict)
    """Per selector tuple: the devices mapping it was asked of, and the devices accepted."""
    _counts: dict[tuple[str, ...], tuple[Mapping[DeviceId, Device], dict[str, int]]] = field(
        default_factory=dict
    )
    """Per selector tuple: the devices mapping it was counted on, and the count per node."""
    _columns: dict[Lookup, tuple[Mapping[DeviceId, Device], list[object]]] = field(
        default_factory=dict
    )
    """Per field read: the devices mapping it was read of, and each placed device's value in
    its order; selector tuples reading a field in common share its pass."""
    _placed_of: tuple[Mapping[DeviceId, Device], list[tuple[DeviceId, Device]]] | None = None
    """The devices mapping last asked of, and its devices on a node."""
    _partitions: dict[tuple[Lookup, ...], _Partition] = field(default_factory=dict)
    """Per fields read (`Reads.lookups`): the placed devices grouped by their values."""
    _followed: Mapping[DeviceId, Device] | None = None
    """The inventory's devices mapping `follow` saw last."""
    runtime_errors: dict[str, str] = field(default_factory=dict)
    """First runtime error per expression, so a pending reason can say why nothing matched."""

    def program(self, expression: str) -> cel.Program:
        program = self._programs.get(expression)
        if program is None:
            program = compile_selector(expression)
            self._programs[expression] = program
        return program

    def _device_context(self, device: Device) -> dict[str, Any]:
        cached = self._variables.get(device.id)
        if cached is not None and (cached[0] is device or cached[0] == device):
            return cached[1]
        context: dict[str, Any] = {"device": device_variables(device), **_FUNCTIONS}
        self._variables[device.id] = (device, context)
        return context

    def matches(self, expression: str, device: Device) -> bool:
        """Whether one selector accepts the device; a runtime error (a result that is not a
        bool included) counts as no match and is kept in `runtime_errors`."""
        key = (expression, device.id)
        cached = self._results.get(key)
        if cached is not None and (cached[0] is device or cached[0] == device):
            return cached[1]
        result = self._alike((expression,), device, lambda: self._evaluate(expression, device))
        self._results[key] = (device, result)
        return result

    def _alike(
        self, expressions: tuple[str, ...], device: Device, answer: Callable[[], bool]
    ) -> bool:
        """The answer of `expressions` for the device: shared with the devices alike in what
        they read, `answer()` for the first of them (or for each, when they read more)."""
        reads = self._reads_of(expressions)
        if reads is None:
            return answer()
        return self._shared_answer(expressions, reads.values(device), answer)

    def _reads_of(self, expressions: tuple[str, ...]) -> Reads | None:
        try:
            return self._reads[expressions]
        except KeyError:
            each = [Reads.of(expression) for expression in expressions]
            reads = self._reads[expressions] = (
                None
                if None in each
                else Reads.reading(f for r in each if r is not None for f in r.fields)
            )
            return reads

    def _shared_answer(
        self, expressions: tuple[str, ...], values: tuple[object, ...], answer: Callable[[], bool]
    ) -> bool:
        alike = (expressions, values)
        shared = self._shared.get(alike)
        if shared is None:
            shared = self._shared[alike] = answer()
        return shared

    def _evaluate(self, expression: str, device: Device) -> bool:
        program = self.program(expression)
        self.evaluations += 1
        try:
            result = program.execute(self._device_context(device))
        except (KeyError, TypeError, ValueError, InvalidInputError) as error:
            self.runtime_errors.setdefault(expression, f"{type(error).__name__}: {error}")
            return False
        if not isinstance(result, bool):
            # a type error of the expression, found only when it runs: no match, and said so
            problem = f"must evaluate to a bool, got {type(result).__name__}"
            self.runtime_errors.setdefault(expression, problem)
            return False
        return result

    def matches_all(
        self, expressions: Iterable[str], device: Device, *, device_id: DeviceId | None = None
    ) -> bool:
        """All selectors accept the device. The combined answer is remembered as well: the
        planner asks it for every free device each cycle, so one lookup beats several.
        `device_id` spares building `device.id` when the caller has it already."""
        selectors = tuple(expressions)
        answers = self._combined.get(selectors)
        if answers is None:
            answers = self._combined[selectors] = {}
        key = device_id or device.id
        cached = answers.get(key)
        if cached is not None and (cached[0] is device or cached[0] == device):
            return cached[1]
        result = self._alike(selectors, device, functools.partial(self._each, selectors, device))
        answers[key] = (device, result)
        return result

    def _each(self, expressions: tuple[str, ...], device: Device) -> bool:
        return all(self.matches(expression, device) for expression in expressions)

    def members(
        self, expressions: tuple[str, ...], devices: Mapping[DeviceId, Device]
    ) -> tuple[Device, ...]:
        """The devices on a node that every expression accepts, tainted or not. Remembered
        while the inventory keeps the same `devices` mapping (it is rebuilt when a slice
        changes): the gauges and the planner's counts ask it of every device, every cycle."""
        return self._accepted(expressions, devices)[1]

    def member_ids(
        self, expressions: tuple[str, ...], devices: Mapping[DeviceId, Device]
    ) -> frozenset[DeviceId]:
        """The ids of `members`: a cycle's free devices are filtered by one set lookup each,
        not by a selector answer each."""
        return self._accepted(expressions, devices)[2]

    def _accepted(
        self, expressions: tuple[str, ...], devices: Mapping[DeviceId, Device]
    ) -> _Accepted:
        known = self._members.get(expressions)
        if known is not None and known[0] is devices:
            return known
        grouped = self._matching_groups(expressions, devices)
        if grouped is None:
            found = [
                (device_id, device)
                for device_id, device in self._placed(devices)
                if self.matches_all(expressions, device, device_id=device_id)
            ]
        else:
            partition, matching = grouped
            found = partition.members(matching)
        accepted = (
            devices,
            tuple(device for _, device in found),
            frozenset(device_id for device_id, _ in found),
        )
        self._members[expressions] = accepted
        return accepted

    def _matching_groups(
        self, expressions: tuple[str, ...], devices: Mapping[DeviceId, Device]
    ) -> tuple[_Partition, list[tuple[object, ...]]] | None:
        """The placed devices grouped by what the expressions read, and the groups they
        accept: one answer per group, not one per device (a new leader asks this of every
        device of the fleet for every selector tuple). None when they read more than fields
        by name, so each device needs its own answer."""
        reads = self._reads_of(expressions)
        if reads is None:
            return None
        partition = self._partition(reads, devices)
        matching = [
            seen
            for seen, first in partition.firsts.items()
            if self._shared_answer(
                expressions, seen, functools.partial(self._each, expressions, first)
            )
        ]
        return partition, matching

    def count_by_node(
        self, expressions: tuple[str, ...], devices: Mapping[DeviceId, Device]
    ) -> dict[str, int]:
        """Untainted `members` per node, free or not (remembered as they are)."""
        known = self._counts.get(expressions)
        if known is not None and known[0] is devices:
            return known[1]
        grouped = self._matching_groups(expressions, devices)
        counts: dict[str, int] = {}
        if grouped is None:
            for device in self.members(expressions, devices):
                if device.node is not None and not device.is_tainted:
                    counts[device.node] = counts.get(device.node, 0) + 1
        else:
            partition, matching = grouped
            for seen in matching:
                for node, count in partition.untainted[seen].items():
                    counts[node] = counts.get(node, 0) + count
        self._counts[expressions] = (devices, counts)
        return counts

    def _placed(self, devices: Mapping[DeviceId, Device]) -> list[tuple[DeviceId, Device]]:
        """The devices on a node, in the mapping's order (remembered per mapping)."""
        known = self._placed_of
        if known is None or known[0] is not devices:
            known = self._placed_of = (
                devices,
                [
                    (device_id, device)
                    for device_id, device in devices.items()
                    if device.node is not None
                ],
            )
        return known[1]

    def _partition(self, reads: Reads, devices: Mapping[DeviceId, Device]) -> _Partition:
        """`_Partition` by what `reads` reads, remembered while the inventory keeps `devices`."""
        known = self._partitions.get(reads.lookups)
        if known is None or known.devices is not devices:
            placed = self._placed(devices)
            known = self._partitions[reads.lookups] = _Partition.of(
                devices, placed, self._values(reads, devices, placed)
            )
        return known

    def _values(
        self,
        reads: Reads,
        devices: Mapping[DeviceId, Device],
        placed: list[tuple[DeviceId, Device]],
    ) -> list[tuple[object, ...]]:
        """`reads.values` of each of `placed` (the devices of `devices` on a node, in order),
        from columns remembered per field while the inventory keeps the same mapping."""
        if not reads.lookups:
            return [()] * len(placed)
        columns = []
        for lookup in reads.lookups:
            known = self._columns.get(lookup)
            if known is None or known[0] is not devices:
                known = self._columns[lookup] = (
                    devices,
                    [read_value(lookup, device) for _, device in placed],
                )
            columns.append(known[1])
        return list(zip(*columns, strict=True))

    def follow(self, devices: Mapping[DeviceId, Device]) -> None:
        """`forget` the devices a new inventory no longer publishes (its mapping is rebuilt
        only when a slice changed), so a long-lived matcher's memory follows the cluster."""
        if devices is not self._followed:
            self.forget(devices)
            self._followed = devices

    def forget(self, keep: Mapping[DeviceId, Device]) -> None:
        """Drop cached results of devices no longer published, so memory follows the inventory."""
        self._shared = {}
        self._variables = {k: v for k, v in self._variables.items() if k in keep}
        self._results = {k: v for k, v in self._results.items() if k[1] in keep}
        self._combined = {
            selectors: {k: v for k, v in answers.items() if k in keep}
            for selectors, answers in self._combined.items()
        }
        self._members = {k: v for k, v in self._members.items() if v[0] is keep}
        self._counts = {k: v for k, v in self._counts.items() if v[0] is keep}
        self._columns = {k: v for k, v in self._columns.items() if v[0] is keep}
        self._partitions = {k: v for k, v in self._partitions.items() if v.devices is keep}
        if self._placed_of is not None and self._placed_of[0] is not keep:
            self._placed_of = None
