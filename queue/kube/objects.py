"""The API objects of an admitted gang, built from its TrainingJob and its reservation.

Owns names (`<job>-<replica>`, Service `<job>`), labels, owner references, the ResourceClaim with
the allocation gangq writes itself, the gated pod pinned to its node and the env contract of
PRODUCT §5. Pure: builds dicts, sends nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gangq.queue.core import model, quantity
from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.inventory import JOB_NAME_LABEL
from gangq.queue.kube import resources
from gangq.queue.store import reservations

REPLICA_LABEL = "gangq.dev/replica"
JOB_UID_LABEL = "gangq.dev/job-uid"
GANG_LABEL = "gangq.dev/gang"
"""The queue entry (store uid) a pod or claim belongs to: the job itself or one scale-up."""
GATE = "gangq.dev/admission"
ADMISSION = "gangq.dev/admitted-at"
"""On each pod: the admission (attempt) it belongs to. Pods keep their names across attempts
(`<job>-0.<job>` stays the rendezvous address), so a kept pod of an earlier attempt is told
apart by this, and deleted before the new attempt's pod is created."""
CLAIM_FINALIZER = "gangq.dev/claim-protection"
"""Only on claims an earlier gangq created: removed when such a claim is deleted. Claims carry
no finalizer now (neither this nor `resource.kubernetes.io/delete-protection`, so a
long-running replica restarts in place on its allocation): gangq deletes a gang's claims only
once none of its pods runs, only gangq creates claims for its device classes (admission
policy), and the store keeps the devices reserved until no pod runs, so gangq never places a
gang on devices a running pod still uses."""
CHECKPOINT_REQUESTED = "gangq.dev/checkpoint-requested"
"""On each pod of a victim that opted in to be asked first: when gangq asked it for a
checkpoint (RFC3339). It is evicted once it reports a newer one, or when its grace ends."""
SIZE = "gangq.dev/size"
"""On each pod: the replicas the job runs at now (rule 13: an elastic job may start below
`spec.replicas`), readable in the pod's podinfo volume like every annotation."""
PODINFO_VOLUME = "gangq-podinfo"
PODINFO_PATH = "/etc/gangq/podinfo"
"""Where every container of a gangq pod reads its pod's annotations (file `annotations`,
kept current by the kubelet): a checkpoint request shows there within a kubelet sync."""
REQUEST = "devices"
CLAIM_REF = "gangq-devices"
MASTER_PORT = 29500
HOSTNAME_LABEL = "kubernetes.io/hostname"


def rfc3339(unix_s: float) -> str:
    """Whole seconds, as the API server writes timestamps; memoized by the second, since every
    step renders each shown job's stamps again and strftime dominates that."""
    return _rfc3339_second(math.floor(unix_s))


@functools.lru_cache(maxsize=65536)
def _rfc3339_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object) -> float | None:
    """Unix seconds of a timestamp as the API server writes it; None when absent or bad."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def replica_name(job: str, replica: int) -> str:
    return f"{job}-{replica}"


def _metadata(
    job: Mapping[str, Any], name: str, replica: int | None, *, gang: str | None = None
) -> dict[str, Any]:
    meta = job["metadata"]
    labels = {JOB_NAME_LABEL: meta["name"], JOB_UID_LABEL: meta["uid"]}
    if replica is not None:
        labels[REPLICA_LABEL] = str(replica)
    if gang is not None:
        labels[GANG_LABEL] = gang
    return {
        "name": name,
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": resources.TRAINING_JOBS.api_version,
                "kind": resources.TRAINING_JOBS.kind,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def identity_selector(devices: Sequence[Device], *, attribute: str | None) -> str | None:
    """A CEL selector naming exactly these devices by their identity attribute, if all have it."""
    if not attribute or not devices:
        return None
    driver = devices[0].driver
    qualified = f"{driver}/{attribute}"
    values = [d.attributes.get(qualified) for d in devices]
    if any(d.driver != driver for d in devices) or any(not isinstance(v, str) for v in values):
        return None
    return f'device.attributes["{driver}"].{attribute} in {json.dumps(sorted(map(str, values)))}'


def claim(
    job: Mapping[str, Any],
    replica: int,
    *,
    spec: Mapping[str, Any],
    pin: str | None,
    gang: str,
) -> dict[str, Any]:
    """The claim of one replica: D devices of the job's class, its selectors, capacity requests
    and constraints."""
    exactly: dict[str, Any] = {
        "deviceClassName": spec.get("deviceClassName") or "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": int(spec["devicesPerReplica"]),
    }
    selectors = [*(spec.get("selectors") or []), *([pin] if pin else [])]
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    requests = (spec.get("capacity") or {}).get("requests")
    if requests:
        exactly["capacity"] = {"requests": dict(requests)}
    devices: dict[str, Any] = {"requests": [{"name": REQUEST, "exactly": exactly}]}
    constraints = [
        c["matchAttribute"] for c in spec.get("constraints") or [] if c.get("matchAttribute")
    ]
    if constraints:
        devices["constraints"] = [{"requests": [REQUEST], "matchAttribute": m} for m in constraints]
    metadata = _metadata(job, replica_name(job["metadata"]["name"], replica), replica, gang=gang)
    return {
        "apiVersion": resources.RESOURCE_CLAIMS.api_version,
        "kind": resources.RESOURCE_CLAIMS.kind,
        "metadata": metadata,
        "spec": {"devices": devices},
    }


def _unqualified(name: str, *, driver: str) -> str:
    """A capacity name as the driver's slice writes it: without the driver's own domain."""
    domain, _, short = name.rpartition("/")
    return short if domain == driver else name


def allocation(placement: model.ReplicaPlacement, *, at: str) -> dict[str, Any]:
    """`status.allocation` with the reserved devices; `allocationTimestamp` is required by
    kube-scheduler 1.36 to honour an allocation it did not write (issue 6, fact 1). A share of
    a multi-allocatable device carries its `shareID` and `consumedCapacity` (case 10-22)."""
    shares = {share.device: share for share in placement.shares}
    results = []
    for device in placement.devices:
        driver, pool, name = reservations.split_device_id(device)
        result: dict[str, Any] = {
            "request": REQUEST,
            "driver": driver,
            "pool": pool,
            "device": name,
        }
        share = shares.get(device)
        if share is not None:
            result["shareID"] = share.share_id
            result["consumedCapacity"] = {
                _unqualified(capacity, driver=driver): quantity.format_milli(amount)
                for capacity, amount in share.consumed
            }
        results.append(result)
    return {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [placement.node]}
                        ]
                    }
                ]
            },
            "allocationTimestamp": at,
        }
    }


def allocated_devices(claim_obj: Mapping[str, Any]) -> tuple[DeviceId, ...] | None:
    """The devices a claim's allocation names, None when it has no allocation."""
    found = (claim_obj.get("status") or {}).get("allocation")
    if not found:
        return None
    results = (found.get("devices") or {}).get("results") or []
    return tuple(
        sorted(DeviceId(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}") for r in results)
    )


def allocated_shares(claim_obj: Mapping[str, Any]) -> dict[DeviceId, str]:
    """The `shareID` of each shared device a claim's allocation names."""
    found = (claim_obj.get("status") or {}).get("allocation") or {}
    return {
        DeviceId(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"): str(r["shareID"])
        for r in (found.get("devices") or {}).get("results") or []
        if r.get("shareID")
    }


def _env(
    job: Mapping[str, Any], replica: int, *, spec: Mapping[str, Any], size: int
) -> list[dict[str, str]]:
    """The env contract of PRODUCT §5: the replica counts are the `size` the job started at;
    the range an elastic job may run at is `GANGQ_MIN_REPLICAS` to `GANGQ_MAX_REPLICAS`
    (both `spec.replicas` for any other job)."""
    name = job["metadata"]["name"]
    most = int(spec["replicas"])
    values = {
        "GANGQ_REPLICA_INDEX": replica,
        "GANGQ_REPLICAS": size,
        "GANGQ_MIN_REPLICAS": int((spec.get("elastic") or {}).get("minReplicas") or most),
        "GANGQ_MAX_REPLICAS": most,
        "GANGQ_DEVICES_PER_REPLICA": int(spec["devicesPerReplica"]),
        "MASTER_ADDR": f"{replica_name(name, 0)}.{name}",
        "MASTER_PORT": MASTER_PORT,
        "WORLD_SIZE": size,
        "NODE_RANK": replica,
    }
    return [{"name": k, "value": str(v)} for k, v in values.items()]


def pod(
    job: Mapping[str, Any],
    replica: int,
    *,
    spec: Mapping[str, Any],
    node: str,
    gated: bool,
    gang: str,
    admission: str,
    size: int,
    group: str | None = None,
) -> dict[str, Any]:
    """The replica's pod from the template: pinned to `node` so the scheduler's DRA PostFilter
    can never clear its claim's allocation (issue 6, fact 2), gated until the whole gang is;
    `admission` names the attempt (pods keep their names across attempts), `size` the
    replicas the job runs at, `group` the PodGroup it is bound with (None: none).

    The template is the cached TrainingJob's own: every level this changes is a new object,
    the rest is shared, read-only (the body is only encoded), rather than copied per pod."""
    template = spec.get("template") or {}
    name = replica_name(job["metadata"]["name"], replica)
    metadata = _metadata(job, name, replica, gang=gang)
    template_meta = template.get("metadata") or {}
    metadata["labels"] = {**(template_meta.get("labels") or {}), **metadata["labels"]}
    metadata["annotations"] = {
        **(template_meta.get("annotations") or {}),
        ADMISSION: admission,
        SIZE: str(size),
    }
    pod_spec: dict[str, Any] = dict(template.get("spec") or {})
    pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), HOSTNAME_LABEL: node}
    pod_spec["hostname"] = name
    pod_spec["subdomain"] = job["metadata"]["name"]
    pod_spec.setdefault("restartPolicy", "Never")
    pod_spec["resourceClaims"] = [
        *(pod_spec.get("resourceClaims") or []),
        {"name": CLAIM_REF, "resourceClaimName": name},
    ]
    env = _env(job, replica, spec=spec, size=size)
    containers = []
    for original in pod_spec.get("containers") or []:
        container = dict(original)
        requested = dict(container.get("resources") or {})
        requested["claims"] = [*(requested.get("claims") or []), {"name": CLAIM_REF}]
        container["resources"] = requested
        kept = [
            e for e in container.get("env") or [] if e.get("name") not in {x["name"] for x in env}
        ]
        container["env"] = [*kept, *env]
        container["volumeMounts"] = [
            *(m for m in container.get("volumeMounts") or [] if m.get("name") != PODINFO_VOLUME),
            {"name": PODINFO_VOLUME, "mountPath": PODINFO_PATH, "readOnly": True},
        ]
        containers.append(container)
    pod_spec["containers"] = containers
    pod_spec["volumes"] = [
        *(v for v in pod_spec.get("volumes") or [] if v.get("name") != PODINFO_VOLUME),
        {
            "name": PODINFO_VOLUME,
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
                ]
            },
        },
    ]
    if gated:
        pod_spec["schedulingGates"] = [{"name": GATE}]
    if group is not None:
        pod_spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def pod_group_name(job: str, *, gang: str, admission: str, replicas: Sequence[int]) -> str:
    """`<job>-<attempt>-<first>-<last>`: one group per release of an attempt (its own gang, or
    the replicas a grow adds). Each name is new, since a pod's `schedulingGroup` is immutable
    and a group's `minCount` too: pods made again for another size, or the next attempt's,
    must not join a group that still waits for the old count."""
    attempt = hashlib.sha256(f"{gang}/{admission}".encode()).hexdigest()[:6]
    return f"{job}-{attempt}-{min(replicas)}-{max(replicas)}"


def pod_group(job: Mapping[str, Any], name: str, *, gang: str, min_count: int) -> dict[str, Any]:
    """A gang policy for `min_count` pods: kube-scheduler binds none until it can bind all
    (its GangScheduling plugin). Owned by the TrainingJob like the gang's other objects."""
    return {
        "apiVersion": resources.POD_GROUPS.api_version,
        "kind": resources.POD_GROUPS.kind,
        "metadata": _metadata(job, name, None, gang=gang),
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The object's status condition of type `kind`, if it has one."""
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return None


def pod_group_of(pod: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod names in `spec.schedulingGroup`, if any."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return str(group) if group else None


def needs_service(spec: Mapping[str, Any]) -> bool:
    """Only replicas that rendezvous need `<job>-0.<job>`: a one-replica job has no peer."""
    return int(spec.get("replicas") or 1) > 1


def service(job: Mapping[str, Any]) -> dict[str, Any]:
    """Headless Service `<job>`: `<job>-0.<job>` resolves before the pods are Ready."""
    metadata = _metadata(job, job["metadata"]["name"], None)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            "selector": {
                JOB_NAME_LABEL: job["metadata"]["name"],
                JOB_UID_LABEL: job["metadata"]["uid"],
            },
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
        },
    }
