"""The generated scenarios by name: the reference and mixed weeks and the trace families.

Owns choosing a generator and its load: without one, the reference and mixed weeks keep the
load they were built with and a family offers `families.DEFAULT_LOAD`.
"""

from __future__ import annotations

from gangq.queue.sim import families, load, mixed, reference
from gangq.queue.sim.trace import Trace

NAMES = ("reference", "mixed", *families.FAMILIES)
"""In the order `--scenario all` reports them."""


def generate(name: str, *, seed: int, days: int, offered: float | None = None) -> Trace:
    """The named scenario's trace; `offered` is the offered load to bring it to."""
    if name in families.FAMILIES:
        family = families.FAMILIES[name]
        if offered is None:
            return families.generate(family, seed=seed, days=days)
        return families.generate(family, seed=seed, days=days, load=offered)
    generator = reference.generate if name == "reference" else mixed.generate
    if offered is None:
        return generator(seed=seed, days=days)
    return load.at_load(
        lambda week: generator(seed=seed if week == 0 else f"{seed}-week-{week}", days=days),
        offered,
    )
