"""Same input, same output: also across processes, whose string hashing differs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import hashlib
from gangq.queue.bench import synthetic
from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.model import Policy

snapshot = synthetic.snapshot(
    nodes=32, pending_count=300, preemption={preemption}, seed=7, now=1_000_000.0
)
result = cycle.run_cycle(
    snapshot=snapshot, policy=Policy(), now=1_000_000.0, matcher=DeviceMatcher()
)
assert result.admissions or result.preemptions
print(len(result.admissions), len(result.preemptions), len(result.reservations))
print(hashlib.sha256(repr(result).encode()).hexdigest())
"""


@pytest.mark.parametrize("preemption", [False, True], ids=["plain", "preemption"])
def test_decisions_do_not_depend_on_hash_seeds(preemption: bool) -> None:
    outputs = []
    for seed in ("1", "2"):
        completed = subprocess.run(
            [sys.executable, "-c", SCRIPT.format(preemption=preemption)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(completed.stdout)
    assert outputs[0] == outputs[1]
