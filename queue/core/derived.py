"""Facts derived from one `Inventory`, computed once for as long as that inventory is current.

The watch caches hand out the same `Inventory` object until a slice, node, class or foreign
claim changes, while every step and every cycle reads facts of it that cost a pass over all
devices (16,000 on a large cluster): which are free candidates, which are evicting. A memo
keyed by the object's identity (never by equality, which would compare every device) makes
those passes once per change instead of once per step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from gangq.queue.core.model import Inventory

T = TypeVar("T")


class PerInventory(Generic[T]):
    """`facts(inventory)`: `build(inventory)`, rebuilt only when handed another inventory.

    One entry: the caller's current inventory. The entry is one tuple, replaced whole, so a
    reader in another thread sees either the old pair or the new one, never a mix."""

    __slots__ = ("_build", "_last")

    def __init__(self, build: Callable[[Inventory], T]) -> None:
        self._build = build
        self._last: tuple[Inventory, T] | None = None

    def __call__(self, inventory: Inventory) -> T:
        last = self._last
        if last is not None and last[0] is inventory:
            return last[1]
        value = self._build(inventory)
        self._last = (inventory, value)
        return value
