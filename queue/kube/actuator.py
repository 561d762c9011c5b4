"""Turns a gang's committed reservation into cluster objects, and takes them away again.

Owns the idempotent writes: the headless Service (gangs of more than one replica), claims
(then their allocation, written by gangq with the exact reserved devices), gated pods, the
one-step release, the in-place restart of a long-running replica and the ordered teardown
(pods that still run first; the claims, in one request, only when no pod of the gang runs, so
devices are never pulled from under a running pod; terminated pods are kept for their logs).
Every write tolerates having been done before: 409 AlreadyExists and 404 NotFound mean done.
Each write costs the API server: a successful one-replica job takes 4 object writes here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from gangq.queue.config import ControllerSettings
from gangq.queue.core import model
from gangq.queue.kube import lifecycle, objects, resources, retry, status, trainingjob
from gangq.queue.kube.client import JSON_PATCH, Kube, KubeError
from gangq.queue.kube.resources import Resource

logger = logging.getLogger(__name__)


async def _tolerant(
    call: Callable[[], Awaitable[object]], *, what: str, ok: tuple[int, ...]
) -> bool:
    """Run a write with retries; statuses in `ok` mean it is already done. False on refusal.
    `what` names the write as a noun phrase (`allocation of ns/x-0`): logs, the object's
    pause and the job's reason when the API server refuses it read it."""
    try:
        await retry.retrying(call, what=what)
    except KubeError as error:
        if error.status in ok:
            return True
        if error.status == 409:  # a stale copy: the next step re-reads and writes again
            retry.note_expected(error, what=what)
            return False
        # a pausing object was refused before and said so then
        level = logging.DEBUG if isinstance(error, retry.BackingOff) else logging.WARNING
        logger.log(level, "%s refused: %s", what, error)
        return False
    return True


async def _create(
    kube: Kube, resource: Resource, body: dict[str, Any], *, urgent: bool = False
) -> bool:
    """True once the object exists. Only a 409 that says AlreadyExists means an earlier
    attempt created it; any other 409 created nothing, and taking it for done would let a
    gang's release go ahead without one of its pods."""
    namespace = body["metadata"]["namespace"]
    what = f"creation of {resource.kind} {namespace}/{body['metadata']['name']}"

    async def create() -> None:
        try:
            await kube.create(resource, namespace, body, urgent=urgent)
        except KubeError as error:
            if error.status != 409 or error.reason != "AlreadyExists":
                raise

    return await _tolerant(create, what=what, ok=())


async def _delete(kube: Kube, resource: Resource, obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    what = f"deletion of {resource.kind} {meta.get('namespace')}/{meta.get('name')}"
    return await _tolerant(
        lambda: kube.delete(resource, str(meta.get("namespace")), str(meta.get("name"))),
        what=what,
        ok=(404,),
    )


class Actuator:
    """Writes for one controller process; `devices` resolves reserved ids to published devices."""

    def __init__(
        self,
        kube: Kube,
        *,
        settings: ControllerSettings,
        clock: Callable[[], float],
        pod_groups: bool = False,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.clock = clock
        self.pod_groups = pod_groups
        """Releases of two or more pods go with a PodGroup (module `podgroups`)."""

    async def build(
        self,
        gang: lifecycle.Gang,
        *,
        spec: Mapping[str, Any],
        inventory: model.Inventory,
        now: float,
    ) -> float | None:
        """Create what is missing, replicas concurrently, each in order claim -> allocation ->
        gated pod; when every replica got through, release them all at once (rule 2).

        The gang's first replica (rank 0, the rendezvous host) is the release's first request:
        its pod is created ungated once every other replica's pod exists gated, and only when
        the API server has accepted it are the other gates lifted, concurrently. So a refused
        create can never leave part of a gang running, a one-pod gang has no gate at all, and
        each replica costs four writes (claim, allocation, pod, gate lift but one), for a skew
        of two requests. One pass suffices: the API server's answers, not the watch caches,
        say that a claim is allocated and a pod exists, so a gang goes from reserved to
        released in one step. A refused write leaves the replica incomplete, and the next step
        picks up from what the caches show then. Returns the release skew in seconds, None
        while incomplete.

        With PodGroups, the group comes first and every pod is made gated in it: the
        scheduler binds none of them before all are released, so the first pod need not go
        first (made ungated alone, it would meet the group short of members and be told it
        is unschedulable at every release).
        """
        job = gang.job
        assert job is not None
        if gang.stale_pods:
            # An earlier attempt's kept pods make way: the new ones take their names.
            await asyncio.gather(
                *(
                    _delete(self.kube, resources.PODS, pod)
                    for pod in gang.stale_pods.values()
                    if not (pod.get("metadata") or {}).get("deletionTimestamp")
                )
            )
            return None
        if objects.needs_service(spec) and not gang.pods:
            await _create(self.kube, resources.SERVICES, objects.service(job))
        group = await self._group(gang, [p.replica for p in gang.placement])
        if group == "":
            return None
        first = min(p.replica for p in gang.placement)
        gated = await asyncio.gather(
            *(
                self._replica(
                    gang,
                    placement,
                    spec=spec,
                    inventory=inventory,
                    now=now,
                    with_pod=placement.replica != first or first in gang.pods or group is not None,
                    group=group,
                )
                for placement in gang.placement
            )
        )
        if any(names is None for names in gated):
            logger.debug("gang %s: not every replica is ready to release", gang.key)
            return None
        waiting = [name for names in gated if names for name in names]
        if not waiting and first in gang.pods:
            return None
        started = time.monotonic()
        if first not in gang.pods and group is None:
            body = objects.pod(
                job,
                first,
                spec=spec,
                node=next(p.node for p in gang.placement if p.replica == first),
                gated=False,
                gang=gang.uid,
                admission=gang.admitted_at,
                size=gang.size,
            )
            if not await _create(self.kube, resources.PODS, body, urgent=True):
                return None
        return await self._release(waiting, started=started)

    async def grow(
        self,
        gang: lifecycle.Gang,
        *,
        added_from: int,
        spec: Mapping[str, Any],
        inventory: model.Inventory,
        now: float,
    ) -> float | None:
        """Build the replicas a grow adds, from `added_from` on, as `build` builds a gang:
        each claim -> allocation -> gated pod (told the new size), replicas concurrently; once
        every added pod exists, all their gates are lifted in one round (rule 13: a grown
        replica's claim is allocated before its pods are released). The running replicas
        are not touched. With PodGroups, two or more added replicas get a group of their own:
        the running group's minCount cannot change, and after a shrink it counts more
        members than run, so joiners there would wait for members that never come. Returns
        the release skew in seconds, None while incomplete."""
        stale = [pod for replica, pod in gang.stale_pods.items() if replica >= added_from]
        if stale:
            # An earlier attempt's kept pods make way: the added ones take their names.
            await asyncio.gather(
                *(
                    _delete(self.kube, resources.PODS, pod)
                    for pod in stale
                    if not (pod.get("metadata") or {}).get("deletionTimestamp")
                )
            )
            return None
        group = await self._group(
            gang, [p.replica for p in gang.placement if p.replica >= added_from]
        )
        if group == "":
            return None
        gated = await asyncio.gather(
            *(
                self._replica(
                    gang,
                    placement,
                    spec=spec,
                    inventory=inventory,
                    now=now,
                    with_pod=True,
                    group=group,
                )
                for placement in gang.placement
                if placement.replica >= added_from
            )
        )
        if any(names is None for names in gated):
            logger.debug("gang %s: not every added replica is ready to release", gang.key)
            return None
        waiting = [name for names in gated if names for name in names]
        if not waiting:
            return None
        return await self._release(waiting, started=time.monotonic())

    async def remove_replicas(
        self, *, namespace: str, job: str, replicas: Sequence[int], gang: str
    ) -> bool:
        """Take these replicas of the gang away, pods (of any phase: their names are needed
        again) before claims; True once the API server has neither left. Read from the API
        server, not the caches: a claim a lagging cache misses still holds its devices, and
        the caller releases them in the store once this says none is left."""
        pods = await self._read_all(resources.PODS, namespace, job, replicas, gang=gang)
        if pods:
            await asyncio.gather(
                *(
                    _delete(self.kube, resources.PODS, pod)
                    for pod in pods
                    if not (pod.get("metadata") or {}).get("deletionTimestamp")
                )
            )
            return False
        claims = await self._read_all(
            resources.RESOURCE_CLAIMS, namespace, job, replicas, gang=gang
        )
        if claims:
            standing = [c for c in claims if not (c.get("metadata") or {}).get("deletionTimestamp")]
            await asyncio.gather(
                *(_delete(self.kube, resources.RESOURCE_CLAIMS, c) for c in standing)
            )
            await self._unprotect_all(claims)
            return False
        return True

    async def _read_all(
        self, resource: Resource, namespace: str, job: str, replicas: Sequence[int], *, gang: str
    ) -> list[dict[str, Any]]:
        """The objects `<job>-<replica>` of the gang the API server has."""

        async def read(replica: int) -> dict[str, Any] | None:
            name = objects.replica_name(job, replica)
            try:
                found = await retry.retrying(
                    lambda: self.kube.get(resource, namespace, name),
                    what=f"read of {resource.kind} {namespace}/{name}",
                )
            except KubeError as error:
                if error.status == 404:
                    return None
                raise
            labels = (found.get("metadata") or {}).get("labels") or {}
            return found if labels.get(objects.GANG_LABEL) == gang else None

        found = await asyncio.gather(*(read(replica) for replica in replicas))
        return [obj for obj in found if obj is not None]

    async def _replica(
        self,
        gang: lifecycle.Gang,
        placement: model.ReplicaPlacement,
        *,
        spec: Mapping[str, Any],
        inventory: model.Inventory,
        now: float,
        with_pod: bool,
        group: str | None,
    ) -> list[tuple[str, str]] | None:
        """One replica's claim, allocation and (`with_pod`) pod in `group`; the pods still
        gated, None when refused."""
        job = gang.job
        assert job is not None
        claim = gang.claims.get(placement.replica)
        if claim is None:
            devices = [inventory.devices[d] for d in placement.devices if d in inventory.devices]
            attribute = (
                self.settings.identity_attributes.get(devices[0].driver) if devices else None
            )
            pin = objects.identity_selector(devices, attribute=attribute)
            body = objects.claim(job, placement.replica, spec=spec, pin=pin, gang=gang.uid)
            if not await _create(self.kube, resources.RESOURCE_CLAIMS, body):
                return None
        unallocated = claim is None or objects.allocated_devices(claim) is None
        if unallocated and not await self._allocate(job, placement, now=now):
            return None
        if not with_pod:
            return []
        pod = gang.pods.get(placement.replica)
        if pod is None:
            body = objects.pod(
                job,
                placement.replica,
                spec=spec,
                node=placement.node,
                gated=True,
                gang=gang.uid,
                admission=gang.admitted_at,
                size=gang.size,
                group=group,
            )
            if not await _create(self.kube, resources.PODS, body):
                return None
            return [(body["metadata"]["namespace"], body["metadata"]["name"])]
        meta = pod["metadata"]
        return [(meta["namespace"], meta["name"])] if lifecycle.is_gated(pod) else []

    async def _group(self, gang: lifecycle.Gang, replicas: Sequence[int]) -> str | None:
        """The PodGroup the release of `replicas` goes with, made if the caches do not show
        it: None when it needs none (PodGroups off, or a single pod), "" while it cannot be
        made yet (refused, or a group of that name is still being deleted)."""
        job = gang.job
        if not self.pod_groups or len(replicas) < 2 or job is None:
            return None
        name = objects.pod_group_name(
            gang.name, gang=gang.uid, admission=gang.admitted_at, replicas=replicas
        )
        found = gang.pod_groups.get(name)
        if found is not None:
            return "" if (found.get("metadata") or {}).get("deletionTimestamp") else name
        body = objects.pod_group(job, name, gang=gang.uid, min_count=len(replicas))
        return name if await _create(self.kube, resources.POD_GROUPS, body) else ""

    async def delete_pod_group(self, namespace: str, name: str) -> bool:
        """True once the API server has no such group (a grow undone takes its group)."""
        return await _tolerant(
            lambda: self.kube.delete(resources.POD_GROUPS, namespace, name),
            what=f"deletion of PodGroup {namespace}/{name}",
            ok=(404,),
        )

    async def _allocate(
        self, job: Mapping[str, Any], placement: model.ReplicaPlacement, *, now: float
    ) -> bool:
        namespace = job["metadata"]["namespace"]
        name = objects.replica_name(job["metadata"]["name"], placement.replica)
        status = {"status": objects.allocation(placement, at=objects.rfc3339(now))}
        return await _tolerant(
            lambda: self.kube.patch(
                resources.RESOURCE_CLAIMS, namespace, name, status, subresource="status"
            ),
            what=f"allocation of {namespace}/{name}",
            # A status patch names no resourceVersion: a 409 wrote nothing, and a pod created
            # now would have the scheduler allocate the claim (with its finalizer) instead.
            ok=(),
        )

    async def _release(self, gated: list[tuple[str, str]], *, started: float) -> float:
        """Lift every remaining gate concurrently; the skew runs from `started` (the release's
        first request) to the last gate acknowledged."""
        remove = [{"op": "remove", "path": "/spec/schedulingGates"}]
        acknowledged: list[float] = []

        async def lift(namespace: str, name: str) -> None:
            done = await _tolerant(
                lambda: self.kube.patch(
                    resources.PODS, namespace, name, remove, content_type=JSON_PATCH, urgent=True
                ),
                what=f"release of Pod {namespace}/{name}",
                ok=(404,),
            )
            if done:
                acknowledged.append(time.monotonic())

        await asyncio.gather(*(lift(namespace, name) for namespace, name in gated))
        if not acknowledged:
            return 0.0
        return max(acknowledged) - started

    async def restart_in_place(
        self, gang: lifecycle.Gang, replicas: tuple[int, ...], *, spec: Mapping[str, Any]
    ) -> None:
        """A long-running replica restarts on its reserved devices: the claim stays allocated
        (it carries no delete-protection finalizer), only the pod is replaced."""
        job = gang.job
        assert job is not None
        by_replica = {p.replica: p for p in gang.placement}
        for replica in replicas:
            pod = gang.pods.get(replica)
            if pod is not None:
                if not (pod.get("metadata") or {}).get("deletionTimestamp"):
                    await _delete(self.kube, resources.PODS, pod)
                continue
            body = objects.pod(
                job,
                replica,
                spec=spec,
                node=by_replica[replica].node,
                gated=False,
                gang=gang.uid,
                admission=gang.admitted_at,
                size=gang.size,
            )
            await _create(self.kube, resources.PODS, body)

    async def request_checkpoint(self, gang: lifecycle.Gang, *, stamp: str) -> bool:
        """Annotate every pod of the gang that does not show the request yet with
        `gangq.dev/checkpoint-requested: stamp` (its pods read it through their downward-API
        volume). The stamp is the stored request time, so writing it again (a retry, a new
        leader) changes nothing. True when this call wrote the first annotation of the gang,
        i.e. the request is news."""
        live = [pod for pod in gang.pods.values() if not lifecycle.is_terminated(pod)]
        asked = [
            pod
            for pod in live
            if ((pod.get("metadata") or {}).get("annotations") or {}).get(
                objects.CHECKPOINT_REQUESTED
            )
            != stamp
        ]
        patch = {"metadata": {"annotations": {objects.CHECKPOINT_REQUESTED: stamp}}}

        async def annotate(pod: Mapping[str, Any]) -> bool:
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            return await _tolerant(
                lambda: self.kube.patch(resources.PODS, namespace, name, patch),
                what=f"checkpoint request on Pod {namespace}/{name}",
                ok=(404,),
            )

        done = await asyncio.gather(*(annotate(pod) for pod in asked))
        return bool(asked) and len(asked) == len(live) and any(done)

    async def announce_size(self, gang: lifecycle.Gang, replicas: Sequence[int]) -> None:
        """Tell these replicas' pods the gang's size (`gangq.dev/size`) and drop a checkpoint
        request that no longer stands: a shrunk gang runs on with the same pods, which read
        their annotations through the downward-API volume the kubelet keeps current."""
        patch = {
            "metadata": {
                "annotations": {objects.SIZE: str(gang.size), objects.CHECKPOINT_REQUESTED: None}
            }
        }

        async def annotate(pod: Mapping[str, Any]) -> None:
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            await _tolerant(
                lambda: self.kube.patch(resources.PODS, namespace, name, patch),
                what=f"size of Pod {namespace}/{name}",
                ok=(404,),
            )

        await asyncio.gather(*(annotate(gang.pods[r]) for r in replicas if r in gang.pods))

    async def teardown(
        self,
        *,
        namespace: str,
        gang: str | None,
        pods: Sequence[Mapping[str, Any]],
        claims: Sequence[Mapping[str, Any]],
        groups: bool = False,
    ) -> bool:
        """One pass of the ordered teardown; True once no pod runs and no claim is left.

        Pods that still run are deleted; terminated ones stay (their logs, rule 11). The
        claims then go in one request by the gang's label (`gang`), or one by one; with
        `groups`, the gang's PodGroups go with them (kept pods are terminal, so kube-
        controller-manager lets the groups go at once)."""
        running = [p for p in pods if not lifecycle.is_terminated(p)]
        if running:
            await asyncio.gather(
                *(
                    _delete(self.kube, resources.PODS, pod)
                    for pod in running
                    if not (pod.get("metadata") or {}).get("deletionTimestamp")
                )
            )
            return False
        if gang is not None and namespace:
            if not groups:
                return await self._delete_claims_of(namespace, gang, cached=claims)
            claims_gone, groups_gone = await asyncio.gather(
                self._delete_claims_of(namespace, gang, cached=claims),
                self._delete_groups_of(namespace, gang),
            )
            return claims_gone and groups_gone
        standing = [c for c in claims if not (c.get("metadata") or {}).get("deletionTimestamp")]
        await asyncio.gather(*(_delete(self.kube, resources.RESOURCE_CLAIMS, c) for c in standing))
        await self._unprotect_all(claims)
        return not claims

    async def _delete_claims_of(
        self, namespace: str, gang: str, *, cached: Sequence[Mapping[str, Any]]
    ) -> bool:
        """Delete the gang's claims by its label; True when the API server's answer shows none
        left. The claims cache has its own watch and may lag (a claim it misses still holds
        its devices), so the answer, not the cache, says whether the reservation may be
        released: one request per ended gang. Claims the cache shows terminating are waited
        for without asking again, and a finalizer an earlier gangq put on them is dropped."""
        if cached and all((c.get("metadata") or {}).get("deletionTimestamp") for c in cached):
            await self._unprotect_all(cached)
            return False
        selector = f"{objects.GANG_LABEL}={gang}"
        left: list[dict[str, Any]] = []

        async def delete() -> None:
            found = await self.kube.delete_collection(
                resources.RESOURCE_CLAIMS, namespace, label_selector=selector
            )
            # Deleted without a finalizer means gone; the others are still being deleted.
            left[:] = [c for c in found if (c.get("metadata") or {}).get("finalizers")]

        what = f"deletion of the claims of gang {gang} in {namespace}"
        if not await _tolerant(delete, what=what, ok=(404,)):
            return False
        await self._unprotect_all(left)
        return not left

    async def _delete_groups_of(self, namespace: str, gang: str) -> bool:
        """Delete the gang's PodGroups by its label; True once the API server has accepted
        it. Asked of the API server, not the cache: a group the cache has not seen yet would
        outlive the attempt. The groups need not be gone yet: none of their pods runs, so
        kube-controller-manager's podgroup-protection lets them go, and waiting for it
        would cost a step and the same two requests again."""
        what = f"deletion of the PodGroups of gang {gang} in {namespace}"
        return await _tolerant(
            lambda: self.kube.delete_collection(
                resources.POD_GROUPS, namespace, label_selector=f"{objects.GANG_LABEL}={gang}"
            ),
            what=what,
            ok=(404,),
        )

    async def _unprotect_all(self, claims: Sequence[Mapping[str, Any]]) -> None:
        for claim in claims:
            if objects.CLAIM_FINALIZER in ((claim.get("metadata") or {}).get("finalizers") or []):
                await self._unprotect(claim)

    async def _unprotect(self, claim: Mapping[str, Any]) -> None:
        """Drop the finalizer an earlier gangq put on its claims."""
        meta = claim.get("metadata") or {}
        name = str(meta.get("name"))
        kept = [f for f in meta.get("finalizers") or [] if f != objects.CLAIM_FINALIZER]
        patch = {
            "metadata": {"finalizers": kept or None, "resourceVersion": meta.get("resourceVersion")}
        }
        await _tolerant(
            lambda: self.kube.patch(
                resources.RESOURCE_CLAIMS, str(meta.get("namespace")), name, patch
            ),
            what=f"removal of the finalizer of ResourceClaim {meta.get('namespace')}/{name}",
            ok=(404,),
        )

    async def drop_job_finalizer(self, job: Mapping[str, Any]) -> bool:
        """Remove the finalizer an earlier gangq put on TrainingJobs (owner references and the
        garbage collector clean up what a job owns; a stale copy gets a 409, retried on the
        next step from a fresher cache)."""
        meta = job.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if trainingjob.FINALIZER not in finalizers:
            return True
        kept = [f for f in finalizers if f != trainingjob.FINALIZER]
        patch = {
            "metadata": {"finalizers": kept or None, "resourceVersion": meta.get("resourceVersion")}
        }
        return await _tolerant(
            lambda: self.kube.patch(
                resources.TRAINING_JOBS, str(meta.get("namespace")), str(meta.get("name")), patch
            ),
            what=f"removal of the finalizer of TrainingJob {trainingjob.key_of(dict(job))}",
            ok=(404,),
        )

    async def event(
        self, job: Mapping[str, Any], reason: str, message: str, *, warning: bool
    ) -> None:
        """A Kubernetes Event on the job; losing one is logged, never fatal."""
        body = status.event(
            job, reason=reason, message=message, warning=warning, now=objects.rfc3339(self.clock())
        )
        try:
            await self.kube.create(resources.EVENTS, str(job["metadata"]["namespace"]), body)
        except KubeError as error:
            logger.info(
                "event %s for %s not recorded: %s", reason, trainingjob.key_of(dict(job)), error
            )
