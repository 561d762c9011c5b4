"""Kubernetes resource quantities ("40Gi", "500m", "1.5e3") as exact integers.

The core compares capacities and requests with integer arithmetic only: every quantity is
held in thousandths of its unit ("milli"), so "500m" CPU is 500 and "1Ki" is 1_024_000.
Rounding up matches the API server, which never lets a request shrink below what was asked.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from gangq.queue.core.errors import InvalidInputError

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)


def parse_milli(text: str | int | float) -> int:
    """Return the quantity in thousandths of its unit, rounded up like the API server does."""
    if isinstance(text, bool):
        raise InvalidInputError(f"quantity {text!r}: a boolean is not a quantity")
    if isinstance(text, int):
        return text * 1000
    if isinstance(text, float):
        return math.ceil(Fraction(text) * 1000)
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise InvalidInputError(
            f"quantity {text!r}: expected a number with an optional suffix such as 500m, 8Gi or 1e3"
        )
    value = Fraction(match["number"])
    if match["sign"] == "-":
        value = -value
    if match["exponent"] is not None:
        value *= Fraction(10) ** int(match["exponent"])
    else:
        suffix = match["suffix"] or ""
        value *= _BINARY_SUFFIXES.get(suffix) or _DECIMAL_SUFFIXES[suffix]
    return math.ceil(value * 1000)


def format_milli(milli: int) -> str:
    """A quantity as the API server writes it: whole units with the largest binary suffix that
    divides them ("20Gi", "66"), else thousandths ("500m")."""
    if milli % 1000:
        return f"{milli}m"
    units = milli // 1000
    for suffix, factor in reversed(_BINARY_SUFFIXES.items()):
        if units and units % factor == 0:
            return f"{units // factor}{suffix}"
    return str(units)


def parse_units(text: str | int | float) -> int:
    """Return the quantity in whole units, rounded up (bytes of memory, pods, devices)."""
    return -(-parse_milli(text) // 1000)
