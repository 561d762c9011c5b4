"""What Kubernetes will refuse in the objects gangq derives from a TrainingJob, found before
anything is reserved.

Owns the limits the API server applies to those objects: pod and claim names and pod
hostnames `<job>-<replica>` (DNS-1123 labels, at most 63) and the headless Service `<job>` (a
DNS-1035 label); a name meeting both is also a valid value of the labels naming the job. The
CRD refuses these at apply time (crds/trainingjob.yaml); this re-checks them for jobs applied
before that rule existed or through a CRD without it. Pure: no I/O.
"""

from __future__ import annotations

import re

DNS_LABEL_MAX = 63
MAX_REPLICA_INDEX = 63
"""Replicas are limited to 64 by the CRD, so replica numbers have at most two digits."""
NAME_MAX = DNS_LABEL_MAX - len(f"-{MAX_REPLICA_INDEX}")
"""60: the longest job name whose `<job>-<replica>` still fits a DNS label."""
_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
INT32_MAX = 2**31 - 1
PRIORITY_LIMIT = 1_000_000_000
"""Priorities are bounded like PriorityClass values a user may create."""


_CAPACITY_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-zA-Z_][a-zA-Z0-9_]*"
)


def is_capacity_name(name: str) -> bool:
    """A DRA capacity name: a C identifier, optionally qualified by a DNS subdomain (the
    CRD's rule on `capacity.requests`)."""
    return len(name) <= 316 and _CAPACITY_NAME.fullmatch(name) is not None


def name_problems(name: str) -> list[str]:
    """Why `name` cannot name a job's pods, hostnames, claims, Service and labels (the same
    limits as the CRD's rules on metadata.name)."""
    problems = []
    if len(name) > NAME_MAX:
        problems.append(
            f"metadata.name is {len(name)} characters, at most {NAME_MAX}: pods and their "
            f"hostnames are named <name>-<replica>, a DNS label of at most {DNS_LABEL_MAX}"
        )
    if not _DNS_1035_LABEL.fullmatch(name):
        problems.append(
            f"metadata.name {name!r} must be a DNS-1035 label (lower-case letters, digits and "
            "'-', starting with a letter): the job's headless Service is named after it"
        )
    return problems
