"""A new leader's first work: make the store and the cluster agree before anything is admitted.

The database can be behind the cluster: a failover with asynchronous replication loses the
last commits, a restore brings back an older backup, an empty database knows nothing. The
cluster then runs gangs the store never heard of, and the store may hold reservations whose
claims were never written or are long gone. Left alone, the cycle would place new gangs on
devices that running pods use, and the sweep would tear healthy gangs down. So each leadership
term starts with one pass, decided here from what the store and the caches show (no I/O; the
reconciler carries the actions out):

- a gang the store does not hold, whose replicas all have an allocated claim and a released
  pod that runs or succeeded, is adopted: its reservations are written from its claims and its
  job is Running again;
- any other gang the store does not hold is torn down, and its job queued again;
- a gang the store holds that has no claim in the cluster gives its devices back and is queued
  again, or finished when its pods all succeeded or its TrainingJob shows it ended;
- a gang the store holds whose claims and pods are complete but of a later attempt than the
  store's (restarted after the backup was taken) is adopted as it runs.

In every step, not only at a term's start, what the cluster still shows of gangs the store does
not hold stays out of the cycle (`lingering`): their claims' devices are placed nowhere, and
their jobs are not admitted again until their claims and pods are gone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gangq.queue.core import inventory, model, quantity
from gangq.queue.core.device import DeviceId, qualify
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import lifecycle, objects, scale, trainingjob

ADOPTED = "adopted"
TORN_DOWN = "torn_down"
RELEASED = "released"
FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class ClusterGang:
    """gangq's objects of one gang label, as the caches show them."""

    uid: str
    job: Mapping[str, Any] | None
    """The TrainingJob whose uid the objects carry; None when it is gone."""
    claims: Mapping[int, Mapping[str, Any]]
    pods: Mapping[int, Mapping[str, Any]]
    """Per replica, the pods that have not been deleted (terminated ones included)."""


@dataclass(frozen=True, slots=True)
class StoreGang:
    """A gang the store holds devices for."""

    uid: str
    key: str
    admission: str
    """The attempt the store admitted, as its pods carry it (`gangq.dev/admitted-at`)."""


@dataclass(frozen=True, slots=True)
class Adopt:
    gang: ClusterGang
    placement: tuple[model.ReplicaPlacement, ...]
    admitted_at: datetime
    """From the pods' `gangq.dev/admitted-at`: the adopted row must name the same attempt."""
    started_at: float
    reason: str


@dataclass(frozen=True, slots=True)
class TearDown:
    gang: ClusterGang
    reason: str


@dataclass(frozen=True, slots=True)
class Release:
    """Give a store gang's devices back: queue it again, or finish it as its pods or its
    TrainingJob show it ended."""

    gang: StoreGang
    finished: str | None
    """`Succeeded` or `Failed` when the job is known to have ended."""
    reason: str


Action = Adopt | TearDown | Release


def decide(
    *,
    held: Iterable[StoreGang],
    cluster: Iterable[ClusterGang],
    jobs_by_uid: Mapping[str, Mapping[str, Any]],
    first: bool = True,
) -> list[Action]:
    """The actions of one recovery pass, in order: the store's gangs first (their devices may
    be the ones an adopted gang holds), then the cluster's gangs the store does not hold.

    The store's gangs are judged on a term's `first` pass only: later, a gang admitted a
    moment ago has no claim yet. The cluster's gangs are judged at every step, so that no
    step of a deposed leader, reading a promoted database before the new leader's first pass,
    ever kills a gang that runs whole (the reconciler's sweep leaves those to be adopted)."""
    gangs = {g.uid: g for g in cluster}
    holding = set()
    actions: list[Action] = []
    for gang in held:
        holding.add(gang.uid)
        if not first:
            continue
        found = gangs.get(gang.uid)
        job = jobs_by_uid.get(scale.job_uid(gang.uid))
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            continue  # the lifecycle ends a deleted job's gang as it always does
        if found is None or not found.claims:
            actions.append(_release(gang, found, jobs_by_uid))
            continue
        if incomplete(found) is None and _admission(found) != gang.admission:
            reason = "released after database recovery: the cluster runs a later attempt"
            actions += [Release(gang, finished=None, reason=reason), _adoption(found)]
    for found in gangs.values():
        if found.uid in holding or not covers(found.job) or not _live(found):
            continue
        problem = incomplete(found)
        if problem is None:
            actions.append(_adoption(found))
        else:
            reason = f"torn down: partial gang found after database recovery: {problem}"
            actions.append(TearDown(found, reason=reason))
    return actions


def covers(job: Mapping[str, Any] | None) -> bool:
    """Whether a gang of this TrainingJob is the recovery's to judge: the job is there, not
    being deleted and not shown finished. The others' leftovers are the sweep's."""
    if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return ((job.get("status") or {}).get("phase")) not in scale.FINISHED


def _release(
    gang: StoreGang, found: ClusterGang | None, jobs_by_uid: Mapping[str, Mapping[str, Any]]
) -> Release:
    """No claim backs the store's reservation. The job ended when every pod it left
    succeeded, or when its TrainingJob says so; else it goes back to the queue."""
    pods = list((found.pods if found else {}).values())
    job = jobs_by_uid.get(scale.job_uid(gang.uid)) or {}
    shown = str((job.get("status") or {}).get("phase") or "")
    if pods and all(lifecycle.phase(p) == "Succeeded" for p in pods):
        return Release(
            gang,
            finished="Succeeded",
            reason="finished before the database recovery: every pod succeeded",
        )
    if shown in scale.FINISHED:
        return Release(
            gang,
            finished=shown,
            reason=f"finished before the database recovery: the TrainingJob shows {shown}",
        )
    return Release(
        gang,
        finished=None,
        reason="released after database recovery: no claim of this gang is in the cluster",
    )


def _live(gang: ClusterGang) -> bool:
    """A claim, or a pod that has not terminated: what is left of an ended gang is neither
    (its terminated pods stay for their logs)."""
    return bool(gang.claims) or any(not lifecycle.is_terminated(p) for p in gang.pods.values())


def _admission(gang: ClusterGang) -> str | None:
    return _annotation(gang.pods[0], objects.ADMISSION) if 0 in gang.pods else None


def incomplete(gang: ClusterGang) -> str | None:
    """Why the gang cannot be adopted as it runs, or None when it can."""
    job = gang.job or {}
    if gang.uid != str((job.get("metadata") or {}).get("uid")):
        return "the added replicas of a scale-up are not adopted"
    try:
        spec = trainingjob.parse_spec(dict(job))
    except InvalidInputError as error:
        return f"the TrainingJob's spec is invalid: {error}"
    size = len(gang.claims)
    lowest = spec.replicas if spec.elastic is None else spec.elastic.min_replicas
    if not lowest <= size <= spec.replicas:
        return f"{size} claims, the job runs {lowest} to {spec.replicas} replicas"
    if set(gang.claims) != set(range(size)):
        return f"claims of replicas {sorted(gang.claims)}, expected 0 to {size - 1}"
    if set(gang.pods) != set(gang.claims):
        return f"pods of replicas {sorted(gang.pods)}, claims of {sorted(gang.claims)}"
    admissions = {_annotation(p, objects.ADMISSION) for p in gang.pods.values()}
    if len(admissions) != 1 or None in admissions:
        return "its pods belong to different attempts"
    for replica in sorted(gang.pods):
        pod, claim = gang.pods[replica], gang.claims[replica]
        if lifecycle.is_gated(pod):
            return f"replica {replica} was never released"
        if lifecycle.phase(pod) not in ("Running", "Succeeded"):
            return f"replica {replica} is {lifecycle.phase(pod)}"
        if not objects.allocated_devices(claim):
            return f"the claim of replica {replica} has no allocation"
        sizes = _annotation(pod, objects.SIZE)
        if sizes is not None and sizes != str(size):
            return f"replica {replica} was told size {sizes}, {size} replicas found"
    return None


def _adoption(gang: ClusterGang) -> Adopt:
    admitted = datetime.fromisoformat(str(_admission(gang)))
    starts = [
        objects.parse_rfc3339((pod.get("status") or {}).get("startTime"))
        for pod in gang.pods.values()
    ]
    known = [s for s in starts if s is not None]
    return Adopt(
        gang,
        placement=tuple(placement_of(r, gang.claims[r], gang.pods[r]) for r in sorted(gang.claims)),
        admitted_at=admitted,
        started_at=max(known) if known else admitted.timestamp(),
        reason=(
            f"adopted after database recovery: {len(gang.claims)} replicas running on their "
            "allocated claims"
        ),
    )


def placement_of(
    replica: int, claim: Mapping[str, Any], pod: Mapping[str, Any]
) -> model.ReplicaPlacement:
    """What the claim holds, as a reservation: its devices, and for a share of a device the
    capacity it consumes and its `shareID`."""
    shares = []
    for device, consumed in inventory.claim_results(claim):
        if consumed is None:
            continue
        driver = device.partition("/")[0]
        amounts = tuple(
            sorted(
                (qualify(str(name), driver=driver), quantity.parse_milli(value))
                for name, value in consumed.items()
            )
        )
        share_id = objects.allocated_shares(claim).get(device, "")
        shares.append(model.Share(device, amounts, share_id))
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return model.ReplicaPlacement(
        replica=replica,
        node=model.NodeName(node),
        devices=tuple(objects.allocated_devices(claim) or ()),
        shares=tuple(shares),
    )


@dataclass(frozen=True, slots=True)
class Lingering:
    """What the store does not hold but the cluster still shows, in every step."""

    devices: frozenset[DeviceId]
    """Allocated in a claim of gangq's that no reservation of that claim's gang backs: a pod
    may use them, so no gang is placed there until the claim is gone or its gang adopted."""
    gangs: frozenset[str]
    """Gang uids with a claim or a live pod while the store holds nothing for them: their
    queue entry is not admitted again until those are gone (the new attempt's claims and
    pods take the same names, and would meet the old ones)."""


def lingering(
    claims_by_gang: Mapping[str, Mapping[str, Mapping[str, Any]]],
    running: Collection[str],
    reserved: Mapping[str, frozenset[DeviceId]],
) -> Lingering:
    """`claims_by_gang`: gangq's claims per gang label; `running`: the gang labels with a pod
    that has not terminated; `reserved`: the devices the store holds per gang uid."""
    devices = frozenset(
        device
        for gang, claims in claims_by_gang.items()
        for claim in claims.values()
        for device in objects.allocated_devices(claim) or ()
        if device not in reserved.get(gang, frozenset())
    )
    gangs = frozenset(g for g in (*claims_by_gang, *running) if g not in reserved)
    return Lingering(devices, gangs)


def _annotation(pod: Mapping[str, Any], name: str) -> str | None:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(name)
    return None if value is None else str(value)
