"""Whose fault a write the API server refused is: the job's spec, or gangq's own (rule 14).

Owns the rule docs/reasons.md states: only a field the user wrote can make a job `invalid`. A
401 or 403, or a 400/422 about anything gangq sets itself (status, names, owner references, its
labels, annotations, gates, claim references and environment variables, the shape of a claim),
is gangq's: the job stays queued and its reason names the controller's problem, which an
administrator fixes (RBAC, credentials, a gangq release). Pure: reads a `KubeError`.
"""

from __future__ import annotations

import re

from gangq.queue.core import explain
from gangq.queue.kube.client import Cause, KubeError

USERS_FIELDS = {
    "pods": re.compile(r"^(spec|metadata\.(labels|annotations))(\.|\[|$)"),
    "resourceclaims": re.compile(
        r"^spec\.devices\.(requests\[\d+\]\.exactly\.(selectors|capacity)|constraints)(\.|\[|$)"
    ),
}
"""Per resource, the fields whose values come from the TrainingJob's spec: a pod's template
(its spec, labels and annotations); a claim's selectors, capacity requests and constraints."""
GANGQS_FIELDS = re.compile(
    r"^spec\.(schedulingGates|resourceClaims|hostname|subdomain"
    r"|(initContainers|containers|ephemeralContainers)\[\d+\]\.resources\.claims)(\.|\[|$)"
)
"""Among a pod's template fields, those gangq writes: the gate, the claim references, the
DNS names."""
GANGQS_NAMES = (
    '"gangq.dev/',
    '"kubernetes.io/hostname"',
    '"gangq-devices"',
    '"GANGQ_',
    '"MASTER_ADDR"',
    '"MASTER_PORT"',
    '"WORLD_SIZE"',
    '"NODE_RANK"',
)
"""Keys and names gangq adds to the template's maps and lists (labels, annotations, node
selector, env, claim references), as a cause quotes them: such a cause is about gangq's entry."""
NOT_CHECKED = "<nil>"
"""Field of the cause that only says other rules were skipped: it names no field."""
UNDECODABLE_POD = "cannot be handled as a Pod"
"""A 400 for a pod body the API server cannot decode: gangq's parts of it are typed, so the
undecodable value is the template's (a quantity that does not parse, a wrong type)."""
RBAC = re.compile(r'cannot (\S+) resource "([^"]+)"')
"""How the authorizer words a missing permission, in a 403 or inside a 422 (case 11-01)."""


def _is_users(resource: str, cause: Cause) -> bool:
    users = USERS_FIELDS.get(resource)
    if users is None or not users.match(cause.field) or GANGQS_FIELDS.match(cause.field):
        return False
    return not any(name in cause.message for name in GANGQS_NAMES)


def is_the_jobs(error: KubeError) -> bool:
    """True when only a change of the job's spec can cure the refusal: a 400 or 422 whose
    every cause names a field the user wrote (or a pod body the server cannot decode)."""
    if error.status not in (400, 422):
        return False
    causes = [c for c in error.causes if c.field != NOT_CHECKED]
    if not causes:
        return error.resource == "pods" and UNDECODABLE_POD in error.message
    return all(_is_users(error.resource, cause) for cause in causes)


def problem(error: KubeError) -> str:
    """The controller's problem in a few words: the permission it lacks, refused credentials,
    or the fields of its own the API server named."""
    found = RBAC.search(error.message)
    if found is not None:
        return f"missing permission {found[1]} {found[2]}"
    if error.status == 401:
        return "its credentials were not accepted (401 Unauthorized)"
    causes = [c for c in error.causes if c.field != NOT_CHECKED]
    if causes:
        return "; ".join(f"{c.field}: {c.message}" for c in causes)
    return error.message


def controller_reason(what: str, error: KubeError) -> explain.PendingReason:
    """`what` names the refused call as a noun phrase: `allocation of inference/llm-prod-0`."""
    return explain.controller(f"the API server refused gangq's {what}: {problem(error)}")
