"""The JSON form of a job's scheduling spec, kept in `jobs.spec`.

Owns the translation of the parts of `PendingJob` that are not columns of their own (selectors,
constraints, capacity requests, topology, pod requirements, restart time, checkpoint grace)
into JSON and back. A stored value that cannot be read back is reported as invalid input, never
guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gangq.queue.core import model
from gangq.queue.core.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class JobSpec:
    selectors: tuple[str, ...]
    constraints: tuple[str, ...]
    capacity_requests: tuple[tuple[str, int], ...]
    topology: model.Topology
    pod: model.PodRequirements
    restart_s: float
    checkpoint_grace_s: float | None


def encode(job: model.PendingJob) -> dict[str, Any]:
    pod = job.pod
    return {
        "restart_s": job.restart_s,
        "checkpoint_grace_s": job.checkpoint_grace_s,
        "selectors": list(job.selectors),
        "constraints": list(job.constraints),
        "capacity_requests": [list(pair) for pair in job.capacity_requests],
        "topology": {"key": job.topology.key, "mode": job.topology.mode.value},
        "pod": {
            "cpu_milli": pod.cpu_milli,
            "memory_bytes": pod.memory_bytes,
            "tolerations": [
                {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
                for t in pod.tolerations
            ],
            "node_selector": [list(pair) for pair in pod.node_selector],
            "required_node_affinity": [
                [
                    {"key": r.key, "operator": r.operator, "values": list(r.values)}
                    for r in term.match_expressions
                ]
                for term in pod.required_node_affinity
            ],
        },
    }


def _pod(raw: dict[str, Any]) -> model.PodRequirements:
    return model.PodRequirements(
        cpu_milli=int(raw.get("cpu_milli", 0)),
        memory_bytes=int(raw.get("memory_bytes", 0)),
        tolerations=tuple(model.Toleration(**t) for t in raw.get("tolerations", ())),
        node_selector=tuple((str(k), str(v)) for k, v in raw.get("node_selector", ())),
        required_node_affinity=tuple(
            model.NodeSelectorTerm(
                tuple(
                    model.NodeSelectorRequirement(r["key"], r["operator"], tuple(r["values"]))
                    for r in term
                )
            )
            for term in raw.get("required_node_affinity", ())
        ),
    )


def _topology(raw: dict[str, Any]) -> model.Topology:
    stanza = raw.get("topology") or {}
    return model.Topology(
        key=stanza.get("key", ""), mode=model.TopologyMode(stanza.get("mode", "None"))
    )


def parse(text: str) -> JobSpec:
    """A stored spec (the column's JSON text) back into core values."""
    try:
        raw = json.loads(text)
        return JobSpec(
            selectors=tuple(raw.get("selectors", ())),
            constraints=tuple(raw.get("constraints", ())),
            capacity_requests=tuple(
                (str(name), int(amount)) for name, amount in raw.get("capacity_requests", ())
            ),
            topology=_topology(raw),
            pod=_pod(raw.get("pod") or {}),
            # specs stored before `spec.restartSeconds` existed take its default
            restart_s=float(raw.get("restart_s", model.DEFAULT_RESTART_S)),
            checkpoint_grace_s=(
                None if raw.get("checkpoint_grace_s") is None else float(raw["checkpoint_grace_s"])
            ),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InvalidInputError(f"stored job spec cannot be read: {error}") from error
