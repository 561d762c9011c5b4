from __future__ import annotations

import pytest

from gangq.queue.core import quantity
from gangq.queue.core.errors import InvalidInputError


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1", 1000),
        ("500m", 500),
        ("1.5", 1500),
        ("2k", 2_000_000),
        ("1Ki", 1_024_000),
        ("80Gi", 80 * 2**30 * 1000),
        ("1e3", 1_000_000),
        ("1.5E-3", 2),  # rounded up, never down
        ("0.1m", 1),
        ("-1", -1000),
        (3, 3000),
    ],
    ids=str,
)
def test_parse_milli(text: str | int, milli: int) -> None:
    assert quantity.parse_milli(text) == milli


def test_units_round_up() -> None:
    assert quantity.parse_units("1500m") == 2
    assert quantity.parse_units("64Gi") == 64 * 2**30


@pytest.mark.parametrize("text", ["", "Gi", "1.2.3", "1Xi", "ten", "1 Gi"])
def test_malformed_quantity_names_the_text(text: str) -> None:
    with pytest.raises(InvalidInputError, match="quantity"):
        quantity.parse_milli(text)
