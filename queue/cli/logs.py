"""`gangq logs NS/NAME`: a TrainingJob replica's container log, through the Kubernetes API.

So an engineer needs neither the pod naming nor kubectl: the TrainingJob is read first (its
uid), then the replica's pods by gangq's labels (`gangq.dev/job-uid`, `gangq.dev/replica`), the
newest being the current attempt; the log comes from `pods/{name}/log` like `kubectl logs`.
`--previous-attempt` shows the run before: the current pod's previous container when it was
restarted in place, else the newest older pod of that replica still kept in the cluster.
Errors of the API server (an unknown container, no previous run) are shown as it words them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gangq.queue import eventloop
from gangq.queue.cli import kubeclient
from gangq.queue.core.errors import GangqError, InvalidInputError
from gangq.queue.kube import objects

GROUP, VERSION, PLURAL = "gangq.dev", "v1alpha1", "trainingjobs"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="print the container log of a TrainingJob replica (like kubectl logs)",
        description=(
            "Print the log of one replica's pod of a TrainingJob through the Kubernetes API "
            "(kubeconfig or in-cluster credentials), without knowing the pod's name."
        ),
    )
    parser.add_argument("key", metavar="NAMESPACE/NAME", help="the TrainingJob")
    parser.add_argument("--replica", type=int, default=0, help="replica index (default 0)")
    parser.add_argument(
        "--previous-attempt",
        action="store_true",
        help="the run before the current one (restarted container, else an older kept pod)",
    )
    parser.add_argument(
        "--container", "-c", help="container name (needed when the pod has several)"
    )
    parser.add_argument("--tail", type=int, help="only the last N lines")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    namespace, slash, name = args.key.partition("/")
    if not slash or not namespace or not name:
        raise InvalidInputError(f"{args.key!r}: give the job as NAMESPACE/NAME")
    if args.replica < 0:
        raise InvalidInputError("--replica must be 0 or more")
    if args.tail is not None and args.tail < 0:
        raise InvalidInputError("--tail must be 0 or more")
    text = eventloop.run(_logs(args, namespace, name))
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


async def _logs(args: argparse.Namespace, namespace: str, name: str) -> str:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    async with await kubeclient.api_client(args.kubeconfig) as api_client:
        core = client.CoreV1Api(api_client)
        try:
            job = await client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
            selector = (
                f"{objects.JOB_UID_LABEL}={job['metadata']['uid']},"
                f"{objects.REPLICA_LABEL}={args.replica}"
            )
            listed = await core.list_namespaced_pod(namespace, label_selector=selector)
            pod, previous = _choose(listed.items, previous_attempt=args.previous_attempt)
            if pod is None:
                raise GangqError(_missing(namespace, name, args))
            text: str = await core.read_namespaced_pod_log(
                pod.metadata.name,
                namespace,
                container=args.container,
                previous=previous,
                tail_lines=args.tail,
            )
        except ApiException as error:
            raise GangqError(_message(error)) from error
    return text


def _choose(pods: list[Any], *, previous_attempt: bool) -> tuple[Any | None, bool]:
    """The pod to read and whether to ask for its previous container."""
    newest_first = sorted(
        (p for p in pods if not p.metadata.deletion_timestamp),
        key=lambda p: p.metadata.creation_timestamp,
        reverse=True,
    )
    if not newest_first:
        return None, False
    if not previous_attempt:
        return newest_first[0], False
    statuses = newest_first[0].status.container_statuses or []
    if any(s.restart_count for s in statuses):
        return newest_first[0], True
    return (newest_first[1], False) if len(newest_first) > 1 else (None, False)


def _missing(namespace: str, name: str, args: argparse.Namespace) -> str:
    which = "no earlier attempt" if args.previous_attempt else "no pod"
    return (
        f"{which} of replica {args.replica} of {namespace}/{name} is in the cluster "
        f"(pods are {objects.replica_name(name, args.replica)}; `gangq job {namespace}/{name}` "
        "tells where the job stands)"
    )


def _message(error: Any) -> str:
    """The API server's own words (its Status message), else the HTTP status."""
    try:
        body = json.loads(error.body)
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return f"{body['message']} ({error.status})"
    return f"the Kubernetes API answered {error.status} {error.reason}"
