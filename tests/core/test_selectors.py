"""CEL device selectors: DRA variables, quantity and semver functions, errors, and caching."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangq.queue.core import cel as device_cel
from gangq.queue.core import device as device_module
from gangq.queue.core.errors import InvalidInputError, SelectorError

SLICE = {
    "metadata": {"name": "gpu-1-slice"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "pool": {"name": "gpu-1", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "gpu-1",
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {
                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    "numa": {"int": 0},
                    "driverVersion": {"version": "550.54.15"},
                    "mig.nvidia.com/capable": {"bool": True},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            },
            {
                "name": "gpu-1",
                "attributes": {"productName": {"string": "NVIDIA A10"}, "numa": {"int": 1}},
                "capacity": {"memory": {"value": "24Gi"}},
                "taints": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}],
            },
        ],
    },
}


@pytest.fixture
def devices() -> list[device_module.Device]:
    return device_module.devices_from_slice(SLICE)


def test_slice_translation_qualifies_names_and_parses_capacity(
    devices: list[device_module.Device],
) -> None:
    h100, a10 = devices
    assert h100.id == "gpu.nvidia.com/gpu-1/gpu-0"
    assert h100.node == "gpu-1"
    assert h100.attributes["gpu.nvidia.com/numa"] == 0
    assert h100.attributes["mig.nvidia.com/capable"] is True
    assert h100.capacity["gpu.nvidia.com/memory"] == 80 * 2**30 * 1000
    assert not h100.is_tainted
    assert a10.is_tainted and a10.is_evicting


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "gpu.nvidia.com"', [True, True]),
        (
            'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
            [True, False],
        ),
        (
            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
            [True, False],
        ),
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("24Gi"))', [True, False]),
        ('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("80Gi"))', [False, True]),
        ('device.attributes["gpu.nvidia.com"].numa == 1', [False, True]),
        ('device.attributes["mig.nvidia.com"].capable', [True, False]),
        (
            'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("535.0.0"))',
            [True, False],
        ),
        ('"productName" in device.attributes["gpu.nvidia.com"]', [True, True]),
    ],
)
def test_selector_results(
    devices: list[device_module.Device], expression: str, expected: list[bool]
) -> None:
    matcher = device_cel.DeviceMatcher()
    assert [matcher.matches(expression, d) for d in devices] == expected


def test_missing_attribute_is_no_match_and_is_remembered(
    devices: list[device_module.Device],
) -> None:
    matcher = device_cel.DeviceMatcher()
    expression = 'device.attributes["mig.nvidia.com"].capable'
    assert matcher.matches(expression, devices[1]) is False
    assert "mig.nvidia.com" in matcher.runtime_errors[expression]


def test_syntax_error_names_expression_and_position() -> None:
    with pytest.raises(SelectorError) as caught:
        device_cel.DeviceMatcher().program("device.driver ==")
    assert caught.value.expression == "device.driver =="
    assert "Syntax error" in str(caught.value)
    assert "device.driver ==" in str(caught.value)


def test_non_boolean_selector_matches_nothing_and_says_why(
    devices: list[device_module.Device],
) -> None:
    """A type error found only at run time must not stop the cycle: no match, error kept."""
    matcher = device_cel.DeviceMatcher()
    assert matcher.matches("device.driver", devices[0]) is False
    assert matcher.runtime_errors["device.driver"] == "must evaluate to a bool, got str"


def test_result_is_recomputed_only_when_the_device_changes(
    devices: list[device_module.Device],
) -> None:
    matcher = device_cel.DeviceMatcher()
    expression = 'device.attributes["gpu.nvidia.com"].numa == 0'
    assert matcher.matches(expression, devices[0])
    moved = replace(devices[0], attributes={**devices[0].attributes, "gpu.nvidia.com/numa": 1})
    assert not matcher.matches(expression, moved)
    matcher.forget({})
    assert matcher.matches(expression, devices[0])


def _fleet() -> list[device_module.Device]:
    """24 GPUs as a fleet publishes them: each its own uuid and index, three products, some
    with a MIG attribute (true, false or none at all, and one with the domain but not the
    name), on three drivers."""
    fleet = []
    for index in range(24):
        attributes: dict[str, device_module.AttributeValue] = {
            "gpu.nvidia.com/uuid": f"GPU-{index:04d}",
            "gpu.nvidia.com/index": index % 8,
            "gpu.nvidia.com/productName": ("NVIDIA H100 80GB HBM3", "NVIDIA A10", "L4")[index % 3],
        }
        if index % 4 == 1:
            attributes["mig.nvidia.com/capable"] = index % 8 == 1
        if index % 4 == 2:
            attributes["mig.nvidia.com/profiles"] = "1g.10gb"
        fleet.append(
            device_module.Device(
                driver=("gpu.nvidia.com", "gpu.nvidia.com", "other.example.com")[index % 3],
                pool=f"node-{index // 8}",
                name=f"gpu-{index % 8}",
                node=f"node-{index // 8}",
                attributes=attributes,
                capacity={"gpu.nvidia.com/memory": (80, 24, 24)[index % 3] * 2**30 * 1000},
            )
        )
    return fleet


FLEET_SELECTORS = (
    'device.driver == "gpu.nvidia.com"',
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity(\"40Gi\")) >= 0",
    'device.attributes["mig.nvidia.com"].capable',
    'has(device.attributes["mig.nvidia.com"].capable)',
    'device.attributes["gpu.nvidia.com"].index < 4 && device.driver.startsWith("gpu")',
    'device.attributes["gpu.nvidia.com"].uuid == "GPU-0005"',
    '"capable" in device.attributes["mig.nvidia.com"]',
    'device.attributes["mig.nvidia.com"].exists(name, name == "capable")',
)


@pytest.mark.parametrize("expression", FLEET_SELECTORS)
def test_a_shared_evaluation_answers_as_each_device_alone(expression: str) -> None:
    fleet = _fleet()
    shared = device_cel.DeviceMatcher()
    alone = [device_cel.DeviceMatcher().matches(expression, d) for d in fleet]
    assert [shared.matches(expression, d) for d in fleet] == alone
    assert any(alone) and not all(alone), "the selector splits the fleet"


@pytest.mark.parametrize(
    ("expression", "evaluations"),
    [
        # three products; devices differ in uuid and index, which the selector does not read
        ('device.attributes["gpu.nvidia.com"].productName == "L4"', 3),
        # driver x index below 4: gpu.nvidia.com or not, true or false
        ('device.attributes["gpu.nvidia.com"].index < 4 && device.driver == "gpu.nvidia.com"', 16),
        # reads the uuid: every device is its own
        ('device.attributes["gpu.nvidia.com"].uuid == "GPU-0005"', 24),
        # reads a whole domain map: no sharing
        ('"capable" in device.attributes["mig.nvidia.com"]', 24),
    ],
)
def test_devices_alike_in_what_a_selector_reads_share_one_evaluation(
    expression: str, evaluations: int
) -> None:
    matcher = device_cel.DeviceMatcher()
    for device in _fleet():
        matcher.matches(expression, device)
    assert matcher.evaluations == evaluations


@pytest.mark.parametrize("expression", (*FLEET_SELECTORS, "true"))
def test_members_of_a_fleet_are_the_devices_every_selector_accepts_alone(expression: str) -> None:
    """`members` answers once per distinct values read, not per device: it must still give
    each device's own answer, in the inventory's order."""
    fleet = _fleet()
    selectors = (FLEET_SELECTORS[0], expression)
    alone = tuple(
        d for d in fleet if all(device_cel.DeviceMatcher().matches(e, d) for e in selectors)
    )
    matcher = device_cel.DeviceMatcher()
    everything = {d.id: d for d in fleet}
    assert matcher.members(selectors, everything) == alone
    assert matcher.member_ids(selectors, everything) == {d.id for d in alone}
    assert [matcher.matches_all(selectors, d) for d in fleet] == [d in alone for d in fleet]


def test_members_follow_the_inventory_mapping_and_forget_unpublished_devices(
    devices: list[device_module.Device],
) -> None:
    matcher = device_cel.DeviceMatcher()
    selectors = ('device.attributes["gpu.nvidia.com"].numa >= 0',)
    everything = {d.id: d for d in devices}
    assert matcher.members(selectors, everything) == tuple(devices)
    assert matcher.member_ids(selectors, everything) == frozenset(everything)
    fewer = {devices[0].id: devices[0]}
    assert matcher.members(selectors, fewer) == (devices[0],)
    assert matcher.member_ids(selectors, fewer) == {devices[0].id}
    matcher.follow(fewer)
    # what the matcher keeps (private on purpose) holds the published device only
    assert {device_id for _, device_id in matcher._results} == {devices[0].id}
    assert set(matcher._variables) == {devices[0].id}


def test_malformed_slice_is_rejected_with_its_name() -> None:
    with pytest.raises(InvalidInputError, match="gpu-1-slice"):
        device_module.devices_from_slice({"metadata": {"name": "gpu-1-slice"}, "spec": {}})
    bad = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "d",
            "pool": {"name": "p"},
            "devices": [{"name": "x", "attributes": {"numa": {"int": "zero"}}}],
        },
    }
    with pytest.raises(InvalidInputError, match="numa"):
        device_module.devices_from_slice(bad)
    nameless = {"metadata": {"name": "s"}, "spec": {**bad["spec"], "devices": [{}]}}
    with pytest.raises(InvalidInputError, match="has no name"):
        device_module.devices_from_slice(nameless)
