"""`/v1/capacity`: devices by state per device class, topology domain and node."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gangq.api import schemas
from gangq.api.deps import PrincipalDep, SessionDep, synced_inventory
from gangq.queue.core import capacity
from gangq.queue.store import reservations

router = APIRouter(prefix="/v1/capacity", tags=["capacity"], responses=schemas.AUTHENTICATED_ERRORS)


@router.get("", response_model=schemas.CapacityOut)
async def get_capacity(
    principal: PrincipalDep, session: SessionDep, request: Request
) -> schemas.CapacityOut:
    """Counts only, no tenant names: every authenticated caller may read it."""
    inventory = synced_inventory(request)
    reserved = await reservations.reserved_devices(session)
    report = capacity.summarize(inventory, reserved, matcher=request.app.state.matcher)
    return schemas.CapacityOut.of(report)
