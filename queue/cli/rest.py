"""`gangq jobs | job | queues | tenants [set] | capacity`: the REST API for people and scripts.

Owns the commands' flags, the HTTP calls (stdlib only, so the CLI needs no extra client) and
how answers are shown: a table by default, the API's JSON with `--json`. It must not decide
or compute anything the API already answers.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any

from gangq.queue.cli import table
from gangq.queue.core.errors import GangqError, InvalidInputError

DEFAULT_SERVER = "http://127.0.0.1:8080"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        default=os.environ.get("GANGQ_SERVER", DEFAULT_SERVER),
        help="gangq API base URL (default: $GANGQ_SERVER or %(default)s)",
    )
    parser.add_argument(
        "--token", default=os.environ.get("GANGQ_TOKEN", ""), help="bearer token ($GANGQ_TOKEN)"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


def register(subparsers: Any) -> None:
    jobs = subparsers.add_parser("jobs", help="list jobs with their position and pending reason")
    _common(jobs)
    jobs.add_argument("--tenant")
    jobs.add_argument("--tier")
    jobs.add_argument("--phase", help="Queued, Admitted, Running, Succeeded, Failed, Suspended")
    jobs.add_argument("--limit", type=int, default=100)
    jobs.add_argument("--offset", type=int, default=0)
    jobs.set_defaults(handler=show_jobs)

    job = subparsers.add_parser("job", help="one job: reason, placement and history")
    _common(job)
    job.add_argument("key", metavar="NAMESPACE/NAME")
    job.set_defaults(handler=show_job)

    queues = subparsers.add_parser("queues", help="pending and admitted jobs per tier and tenant")
    _common(queues)
    queues.set_defaults(handler=show_queues)

    tenants = subparsers.add_parser("tenants", help="tenants and their quotas")
    _common(tenants)
    tenants.set_defaults(handler=show_tenants)
    actions = tenants.add_subparsers(dest="action", metavar="ACTION")
    change = actions.add_parser("set", help="set one device class quota of a tenant")
    _common(change)
    change.add_argument("tenant")
    change.add_argument("--device-class", required=True)
    change.add_argument("--nominal", type=int, help="guaranteed devices (needed for a new class)")
    change.add_argument("--borrowing-limit", type=int, help="devices it may borrow above nominal")
    change.add_argument("--weight", type=float, help="fair-share weight")
    change.add_argument("--tiers", help="comma-separated tiers the tenant may use; '' for all")
    change.set_defaults(handler=set_tenant)

    capacity = subparsers.add_parser("capacity", help="devices by state, largest placeable gang")
    _common(capacity)
    capacity.add_argument("--nodes", action="store_true", help="also show every node")
    capacity.set_defaults(handler=show_capacity)


def _detail(body: bytes) -> str:
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:300]
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', ()))}: {item.get('msg')}" for item in detail
        )
    return str(detail)


def call(args: argparse.Namespace, method: str, *, path: str, body: Any = None) -> Any:
    """One API request; every failure becomes a GangqError that says what to do."""
    url = args.server.rstrip("/") + path
    if not url.startswith(("http://", "https://")):
        raise InvalidInputError(f"--server must be an http(s) URL, got {args.server!r}")
    headers = {"Accept": "application/json"}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        hint = " (pass --token or set GANGQ_TOKEN)" if error.code == 401 else ""
        raise GangqError(f"{method} {path}: {error.code} {_detail(error.read())}{hint}") from error
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        raise GangqError(
            f"cannot reach gangq at {args.server}: {reason} (set --server or GANGQ_SERVER)"
        ) from error


def _query(**values: object) -> str:
    kept = {k: v for k, v in values.items() if v is not None}
    return "?" + urllib.parse.urlencode(kept) if kept else ""


def _print_json(value: Any) -> int:
    print(json.dumps(value, indent=2))
    return 0


def _age(stamp: str | None) -> float | None:
    if stamp is None:
        return None
    return time.time() - datetime.fromisoformat(stamp).timestamp()


def _eta(job: dict[str, Any]) -> str:
    """The start a backfill reservation holds for the job, when it has one."""
    if job["etaSeconds"] is None:
        return "-"
    return f"~{table.duration(job['etaSeconds'])} (reserved start {job['reservedStartAt']})"


def _predicted(prediction: dict[str, Any]) -> str:
    """The predicted runtime, and the predicted end of a job holding devices."""
    if prediction.get("runtimeSeconds") is None:
        return "-"
    text = f"~{table.duration(prediction['runtimeSeconds'])}"
    if prediction.get("endAt") is not None:
        text += f" (ends ~{prediction['endAt']})"
    return text


def _lost_work(prediction: dict[str, Any]) -> str:
    """The work an eviction now would destroy, in device-hours, and what bounds it."""
    lost = prediction.get("lostWorkDeviceSeconds")
    if lost is None:
        return "-"
    since = prediction.get("lastCheckpointAt") or "the start"
    text = f"{lost / 3600:.1f} device-h if evicted now (since {since}"
    if prediction.get("checkpointIntervalSeconds") is not None:
        text += f", at most one {table.duration(prediction['checkpointIntervalSeconds'])} interval"
    return text + ")"


def _size(job: dict[str, Any]) -> str:
    """The replicas it holds devices for of the most it runs at, the range of an elastic job
    and the size it is growing or shrinking to (rule 13)."""
    size = "-" if job["size"] is None else f"{job['size']}/{job['maxReplicas']} replicas"
    if job["minReplicas"] < job["maxReplicas"]:
        size += f" (elastic, {job['minReplicas']} to {job['maxReplicas']})"
    if job.get("growingTo") is not None:
        size += f", growing to {job['growingTo']}"
    if job.get("shrinkingTo") is not None:
        size += f", shrinking to {job['shrinkingTo']}"
    return size


def show_jobs(args: argparse.Namespace) -> int:
    query = _query(
        tenant=args.tenant, tier=args.tier, phase=args.phase, limit=args.limit, offset=args.offset
    )
    page = call(args, "GET", path=f"/v1/jobs{query}")
    if args.json:
        return _print_json(page)
    rows = [
        (
            f"{j['namespace']}/{j['name']}",
            j["tenant"],
            j["tier"],
            j["phase"],
            "-" if j["queuePosition"] is None else str(j["queuePosition"]),
            f"{j['replicas']}x{j['devicesPerReplica']}",
            table.duration(_age(j["submittedAt"]) if j["phase"] == "Queued" else None),
            table.duration(j["etaSeconds"]),
            (j["reason"] or {}).get("message", ""),
        )
        for j in page["items"]
    ]
    headers = ("job", "tenant", "tier", "phase", "pos", "gang", "waiting", "eta", "reason")
    print(table.render(headers, rows))
    if page["total"] > len(rows):
        print(f"({len(rows)} of {page['total']} shown; use --limit and --offset)")
    return 0


def show_job(args: argparse.Namespace) -> int:
    namespace, _, name = args.key.partition("/")
    if not namespace or not name or "/" in name:
        raise InvalidInputError(f"the job must be given as NAMESPACE/NAME, got {args.key!r}")
    path = f"/v1/jobs/{urllib.parse.quote(namespace)}/{urllib.parse.quote(name)}"
    detail = call(args, "GET", path=path)
    if args.json:
        return _print_json(detail)
    job = detail["job"]
    position = "" if job["queuePosition"] is None else f" (position {job['queuePosition']})"
    ended = [e for e in detail["history"] if e["kind"] in ("succeeded", "failed")]
    why = (job["reason"] or {}).get("message") or (ended[-1]["reason"] if ended else "-")
    facts = [
        ("Job", f"{job['namespace']}/{job['name']}"),
        ("Tenant", job["tenant"]),
        ("Tier", f"{job['tier']} (priority {job['priority']})"),
        ("Gang", f"{job['replicas']} x {job['devicesPerReplica']} {job['deviceClassName']}"),
        ("Size", _size(job)),
        ("Phase", job["phase"] + position),
        ("Reason", why),
        ("ETA", _eta(job)),
        ("Predicted", _predicted(detail.get("prediction") or {})),
        ("Lost work", _lost_work(detail.get("prediction") or {})),
        ("Submitted", job["submittedAt"]),
        ("Admitted", job["admittedAt"] or "-"),
        ("Started", job["startedAt"] or "-"),
        ("Restarts", f"{job['restarts']} (preemptions {job['preemptions']})"),
    ]
    print("\n".join(f"{label + ':':<11}{value}" for label, value in facts))
    # A job holding nothing (finished, or requeued) shows where its last attempt ran.
    held = detail["placement"]
    ran = held or detail.get("lastPlacement") or []
    if ran:
        print("\nPlacement:" if held else "\nLast attempt ran on (devices released):")
        placement = [(str(p["replica"]), p["node"], ", ".join(p["devices"])) for p in ran]
        print(table.render(("replica", "node", "devices"), placement))
    groups = detail.get("podGroups") or []
    if groups:
        # kube-scheduler's word on each gang's PodGroup: bound together, or why not yet.
        print("\nPod groups:")
        rows = [
            (g["name"], str(g["minCount"]), g["scheduled"], g["message"] or g["reason"] or "-")
            for g in groups
        ]
        print(table.render(("pod group", "min", "scheduled", "message"), rows))
    print("\nHistory:")
    history = [(e["at"], e["kind"], e["actor"], e["reason"]) for e in detail["history"]]
    print(table.render(("time", "event", "by", "reason"), history))
    failures = [
        (
            e["at"],
            str(f.get("replica")),
            f.get("node") or "-",
            "-" if f.get("exitCode") is None else str(f["exitCode"]),
            f.get("reason") or "-",
            f.get("message") or "-",
        )
        for e in detail["history"]
        for f in (e.get("details") or {}).get("replicas") or []
    ]
    if failures:
        # Each failed attempt's replicas: where they ran and how they ended (pods of earlier
        # attempts are gone, their story stays here).
        print("\nFailed replicas:")
        print(table.render(("time", "replica", "node", "exit", "reason", "message"), failures))
    return 0


def show_queues(args: argparse.Namespace) -> int:
    queues = call(args, "GET", path="/v1/queues")
    if args.json:
        return _print_json(queues)
    rows = [
        (
            q["tier"],
            q["tenant"],
            str(q["pending"]),
            str(q["admitted"]),
            table.duration(q["oldestWaitSeconds"]),
        )
        for q in queues
    ]
    print(table.render(("tier", "tenant", "pending", "admitted", "oldest wait"), rows))
    return 0


NO_QUOTA = {
    "deviceClassName": "-",
    "nominal": 0,
    "borrowingLimit": 0,
    "weight": 0,
    "allowedTiers": [],
}


def _tenant_rows(tenants: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    return [
        (
            t["name"],
            q["deviceClassName"],
            str(q["nominal"]),
            str(q["borrowingLimit"]),
            f"{q['weight']:g}",
            ",".join(q["allowedTiers"]) or "(all)",
        )
        for t in tenants
        for q in t["quotas"] or [NO_QUOTA]
    ]


TENANT_HEADERS = ("tenant", "device class", "nominal", "borrowing limit", "weight", "tiers")


def show_tenants(args: argparse.Namespace) -> int:
    tenants = call(args, "GET", path="/v1/tenants")
    if args.json:
        return _print_json(tenants)
    print(table.render(TENANT_HEADERS, _tenant_rows(tenants)))
    return 0


def _current_quotas(args: argparse.Namespace, path: str) -> list[dict[str, Any]]:
    try:
        quotas: list[dict[str, Any]] = call(args, "GET", path=path)["quotas"]
    except GangqError as error:
        if f"GET {path}: 404 " not in str(error):
            raise
        return []
    return quotas


def set_tenant(args: argparse.Namespace) -> int:
    """Change one device class of a tenant; its other classes are sent back unchanged."""
    path = f"/v1/tenants/{urllib.parse.quote(args.tenant)}"
    quotas = _current_quotas(args, path)
    existing = next((q for q in quotas if q["deviceClassName"] == args.device_class), None)
    if existing is None and args.nominal is None:
        raise InvalidInputError(
            f"tenant {args.tenant} has no quota for {args.device_class} yet: give --nominal"
        )
    changed = dict(existing or {"deviceClassName": args.device_class})
    for field, value in (
        ("nominal", args.nominal),
        ("borrowingLimit", args.borrowing_limit),
        ("weight", args.weight),
        ("allowedTiers", None if args.tiers is None else [t for t in args.tiers.split(",") if t]),
    ):
        if value is not None:
            changed[field] = value
    others = [q for q in quotas if q["deviceClassName"] != args.device_class]
    result = call(args, "PUT", path=path, body={"quotas": [*others, changed]})
    if args.json:
        return _print_json(result)
    print(table.render(TENANT_HEADERS, _tenant_rows([result])))
    return 0


USAGE_HEADERS = (
    "total",
    "free",
    "reserved",
    "held by others",
    "unavailable",
    "tainted",
    "largest gang",
)


def _usage(u: dict[str, Any]) -> tuple[str, ...]:
    gang = u["largestPlaceableGang"]
    return (
        str(u["total"]),
        str(u["free"]),
        str(u["reserved"]),
        str(u["heldByOthers"]),
        str(u["unavailable"]),
        str(u["tainted"]),
        f"{gang['replicas']} x {gang['devicesPerReplica']}",
    )


def show_capacity(args: argparse.Namespace) -> int:
    report = call(args, "GET", path="/v1/capacity")
    if args.json:
        return _print_json(report)
    classes = [(u["deviceClassName"], *_usage(u)) for u in report["deviceClasses"]]
    print(table.render(("device class", *USAGE_HEADERS), classes))
    domains = [
        (f"{d['key']}={d['value']}", u["deviceClassName"], *_usage(u))
        for d in report["domains"]
        for u in d["deviceClasses"]
    ]
    if domains:
        print()
        print(table.render(("domain", "device class", *USAGE_HEADERS), domains))
    tainted = {t["node"]: ", ".join(t["taints"]) for t in report["taintedNodes"]}
    if tainted:
        # Apart from the free devices: only jobs tolerating these taints may use them.
        rows = [
            (n["node"], u["deviceClassName"], str(u["tainted"]), tainted[n["node"]])
            for n in report["nodes"]
            if n["node"] in tainted
            for u in n["deviceClasses"]
        ]
        print()
        print(table.render(("tainted node", "device class", "devices", "taints"), rows))
    if args.nodes:
        nodes = [
            (n["node"], u["deviceClassName"], *_usage(u))
            for n in report["nodes"]
            for u in n["deviceClasses"]
        ]
        print()
        print(table.render(("node", "device class", *USAGE_HEADERS), nodes))
    return 0
