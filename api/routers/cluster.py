"""`/v1/cluster`: every device of every managed class as a cell, by rack and node, with its holder.

What the cluster page draws. Counts and states are for everyone (as in `/v1/capacity`); the job
and tenant holding a device are shown only to callers who may read that tenant, so a viewer
sees another tenant's devices as reserved and nothing more.
"""

from __future__ import annotations

import re

from fastapi import APIRouter, Request

from gangq.api import schemas
from gangq.api.deps import PrincipalDep, SessionDep, synced_inventory
from gangq.queue.core import capacity, model
from gangq.queue.core.device import Device, DeviceId
from gangq.queue.store import reservations

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], responses=schemas.AUTHENTICATED_ERRORS)


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """gpu-2 before gpu-10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text))


def _place(pair: tuple[Device, str]) -> tuple[object, ...]:
    return (_natural(pair[0].node or ""), _natural(pair[0].name))


def _node_status(node: model.Node | None) -> str:
    if node is None or not node.ready:
        return "NotReady"
    return "Cordoned" if node.unschedulable else "Ready"


@router.get("", response_model=schemas.ClusterOut)
async def get_cluster(
    principal: PrincipalDep, session: SessionDep, request: Request
) -> schemas.ClusterOut:
    """Devices per class, rack and node; holders named only where the caller may read them."""
    inventory = synced_inventory(request)
    held = await reservations.holders(session)
    reserved = frozenset(held)
    matcher = request.app.state.matcher
    rack_label = inventory.topology_keys[0] if inventory.topology_keys else ""
    jobs: list[schemas.HolderOut] = []
    index: dict[str, int] = {}

    def holder_index(device_id: DeviceId) -> int:
        holder = held.get(device_id)
        if holder is None or not principal.can_read_tenant(holder.tenant):
            return -1
        if holder.job not in index:
            index[holder.job] = len(jobs)
            jobs.append(schemas.HolderOut(key=holder.job, tenant=holder.tenant, tier=holder.tier))
        return index[holder.job]

    classes = []
    states = capacity.device_states(inventory, reserved, matcher=matcher)
    report = capacity.summarize_states(inventory, states)
    for class_name, members in sorted(states.items()):
        by_node: dict[str, list[tuple[str, str, int]]] = {}
        for device, state in sorted(members, key=_place):
            by_node.setdefault(device.node or "", []).append(
                (device.name, state, holder_index(device.id))
            )
        racks: dict[str, list[schemas.NodeCellsOut]] = {}
        for node_name, cells in by_node.items():
            node = inventory.nodes.get(model.NodeName(node_name))
            rack = "" if node is None else node.labels.get(rack_label, "")
            racks.setdefault(rack, []).append(
                schemas.NodeCellsOut(
                    name=node_name,
                    status=_node_status(node),
                    taints=[str(t) for t in report.tainted_nodes.get(node_name, ())],
                    devices=cells,
                )
            )
        classes.append(
            schemas.ClassCellsOut(
                usage=schemas.UsageOut.of(class_name, report.classes[class_name]),
                racks=[
                    schemas.RackCellsOut(name=name, nodes=racks[name])
                    for name in sorted(racks, key=_natural)
                ],
            )
        )
    return schemas.ClusterOut(rack_label=rack_label, device_classes=classes, jobs=jobs)
