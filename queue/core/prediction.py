"""Runtime predictions from history (rule 5): how long a job will run, judged by how long the
recent finished runs of the same tenant and shape ran.

Users' `maxRuntimeSeconds` are safety bounds, typically several times the real run, so planning
backfill on them leaves devices idle and turns every ETA into a worst case. Like EASY++ (Tsafrir,
Etsion and Feitelson), gangq predicts from the last runs of the same tenant, tier, gang shape and
job family, keeps `maxRuntimeSeconds` as the hard bound, and lengthens a prediction that a job
outlives. One code path for the controller (fed from PostgreSQL) and the simulator (fed from its
own finished jobs). No I/O.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FAMILY_LABEL = "gangq.dev/family"
_NUMERIC_SUFFIX = re.compile(r"([-_.]?[0-9]+)+$")
_OUTLIVED_FACTOR = 1.5
"""A job past its prediction is expected to run this much longer than it has so far run (by
its prediction's measure), so the plans built on it slip in a few large steps, not many small."""
_OUTLIVED_MIN_S = 60.0


@dataclass(frozen=True, slots=True)
class RunShape:
    """What makes two runs comparable: same tenant, tier, gang shape and family."""

    tenant: str
    tier: str
    replicas: int
    devices_per_replica: int
    family: str


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """One attempt that ran to its own end (succeeded or failed by itself, not evicted)."""

    shape: RunShape
    runtime_s: float
    ended_at: float


def family_of(name: str, labels: Mapping[str, str] | None = None) -> str:
    """The label `gangq.dev/family` when set, else the name without its numeric suffix, so
    `nightly-eval-0412` and `nightly-eval-0413` share history while `train-llm` stands alone."""
    if labels:
        label = labels.get(FAMILY_LABEL)
        if label:
            return label
    stripped = _NUMERIC_SUFFIX.sub("", name)
    return stripped or name


class RuntimePredictor:
    """Keeps the last `window` runs per shape; predicts their mean, capped by the job's bound.

    The mean of a few recent runs (EASY++ uses two) follows a family whose runs change over a
    week while one outlier is diluted; the cap keeps it honest against `maxRuntimeSeconds`.
    """

    def __init__(self, runs: Iterable[FinishedRun] = (), *, window: int = 4) -> None:
        self._window = window
        self._runs: dict[RunShape, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        for run in sorted(runs, key=lambda r: r.ended_at):
            self.record(run)

    def record(self, run: FinishedRun) -> None:
        if run.runtime_s > 0:
            self._runs[run.shape].append(run.runtime_s)

    def predict(self, shape: RunShape, *, max_runtime_s: float | None) -> float | None:
        """Expected run in seconds; the bound when there is no history; None when neither."""
        history = self._runs.get(shape)
        if not history:
            return max_runtime_s
        mean = sum(history) / len(history)
        return mean if max_runtime_s is None else min(mean, max_runtime_s)

    @staticmethod
    def outlived(predicted_s: float, *, elapsed_s: float, max_runtime_s: float | None) -> float:
        """A longer prediction for a job that has run `elapsed_s` past its `predicted_s`."""
        if elapsed_s < predicted_s:
            return predicted_s
        longer = max(elapsed_s * _OUTLIVED_FACTOR, elapsed_s + _OUTLIVED_MIN_S)
        return longer if max_runtime_s is None else min(longer, max_runtime_s)
