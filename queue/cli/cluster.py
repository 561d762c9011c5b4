"""`gangq cluster up`: serve the embedded cluster emulator and write a kubeconfig for it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

import yaml

from gangq.queue import eventloop
from gangq.queue.core.errors import InvalidInputError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("cluster", help="run the embedded Kubernetes API emulator")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="serve an emulated GPU cluster until interrupted")
    up.add_argument("--nodes", type=int, default=8, help="GPU nodes (default 8)")
    up.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    up.add_argument(
        "--racks", type=int, default=2, help="racks the nodes are spread over (default 2)"
    )
    up.add_argument(
        "--partitioned-nodes",
        type=int,
        default=0,
        help="of the nodes, how many publish each GPU whole and as MIG-like partitions "
        "(class partition.<driver>; default 0)",
    )
    up.add_argument(
        "--shared-nodes",
        type=int,
        default=0,
        help="of the nodes, how many publish GPUs that several claims share by memory and "
        "multiprocessors (class shared.<driver>; default 0)",
    )
    up.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    up.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path("kubesim.kubeconfig"),
        help="where to write the kubeconfig (default ./kubesim.kubeconfig)",
    )
    up.add_argument(
        "--crd",
        type=Path,
        action="append",
        default=[],
        help="CRD YAML file to install at start (repeatable)",
    )
    up.add_argument(
        "--ready-seconds",
        type=float,
        default=1.0,
        help="delay before a bound pod becomes Running and Ready (default 1)",
    )
    up.add_argument(
        "--watch-window",
        type=int,
        default=None,
        help="events a watch can resume from before it gets 410 Expired (default 5000)",
    )
    up.add_argument(
        "--podgroups",
        action="store_true",
        help="serve scheduling.k8s.io/v1alpha2 Workloads and PodGroups and gang-schedule the pods "
        "that name a PodGroup, as the alpha feature gates GenericWorkload, GangScheduling and "
        "DRAWorkloadResourceClaims do (default off, like the gates)",
    )
    up.add_argument(
        "--token",
        default=None,
        help="require this bearer token (default: no authentication; kubectl sends no token "
        "over plain HTTP)",
    )
    up.add_argument(
        "--controller-kubeconfig",
        type=Path,
        default=None,
        help="also install gangq's namespace and the RBAC deploy/ ships, and write a kubeconfig "
        "of its ServiceAccount here, for a controller refused what a cluster would refuse it "
        "(needs --token: without one no permission is checked)",
    )
    up.set_defaults(handler=run_up)


def _check(args: argparse.Namespace) -> None:
    for name in ("nodes", "gpus_per_node", "racks"):
        if getattr(args, name) < 1:
            raise InvalidInputError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("partitioned_nodes", "shared_nodes"):
        if getattr(args, name) < 0:
            raise InvalidInputError(f"--{name.replace('_', '-')} must not be negative")
    if args.partitioned_nodes + args.shared_nodes > args.nodes:
        raise InvalidInputError(
            "--partitioned-nodes plus --shared-nodes must not exceed --nodes "
            f"({args.partitioned_nodes} + {args.shared_nodes} > {args.nodes})"
        )
    if args.watch_window is not None and args.watch_window < 1:
        raise InvalidInputError("--watch-window must be at least 1")
    if args.controller_kubeconfig is not None and args.token is None:
        raise InvalidInputError("--controller-kubeconfig needs --token")
    if not 0 <= args.port <= 65535:
        raise InvalidInputError("--port must be between 0 and 65535")
    for path in args.crd:
        if not path.is_file():
            raise InvalidInputError(f"--crd {path}: no such file")


async def _serve(args: argparse.Namespace) -> None:
    from gangq.queue.kubesim.cluster import Inventory
    from gangq.queue.kubesim.emulator import Emulator

    inventory = Inventory(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        racks=args.racks,
        partitioned_nodes=args.partitioned_nodes,
        shared_nodes=args.shared_nodes,
    )
    emulator = Emulator(
        inventory=inventory,
        port=args.port,
        crds=tuple(args.crd),
        ready_seconds=args.ready_seconds,
        token=args.token,
        podgroups=args.podgroups,
    )
    if args.watch_window is not None:
        emulator.history_size = args.watch_window
    async with emulator as cluster:
        args.kubeconfig.write_text(yaml.safe_dump(cluster.kubeconfig(), sort_keys=False))
        if args.controller_kubeconfig is not None:
            from gangq.queue.demo import serviceaccount

            token = serviceaccount.controller_token(cluster)
            args.controller_kubeconfig.write_text(
                yaml.safe_dump(cluster.kubeconfig(token), sort_keys=False)
            )
        split = (
            f"; {args.partitioned_nodes} partitioned, {args.shared_nodes} shared"
            if args.partitioned_nodes or args.shared_nodes
            else ""
        )
        gangs = "; PodGroups served" if args.podgroups else ""
        print(
            f"kubesim serving {cluster.base_url} ({args.nodes} nodes x "
            f"{args.gpus_per_node} GPUs, {args.racks} racks{split}{gangs})"
        )
        print(
            f"kubeconfig written to {args.kubeconfig}; "
            f"try: kubectl --kubeconfig {args.kubeconfig} get nodes"
        )
        sys.stdout.flush()
        await asyncio.Event().wait()


def run_up(args: argparse.Namespace) -> int:
    _check(args)
    with contextlib.suppress(KeyboardInterrupt):
        eventloop.run(_serve(args))
    return 0
