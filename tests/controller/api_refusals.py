"""Refusals a real cluster answers gangq when its access is wrong, to inject into the emulator."""

from __future__ import annotations

import json
from pathlib import Path

from gangq.queue.kubesim import status

REFERENCE = Path(__file__).resolve().parents[1] / "contract" / "reference"
MISSING_BINDING = REFERENCE / "11-01-claim-allocation-without-binding-permission-422.json"
GANGQ = "system:serviceaccount:gangq-system:gangq"


def missing_binding(claim: str) -> status.ApiError:
    """The 422 a 1.36.2 cluster answered an allocation written without permission on
    `resourceclaims/binding` (case 11-01), naming `claim` and gangq's service account."""
    captured = json.loads(MISSING_BINDING.read_text())["response"]["body"]
    text = json.dumps(captured)
    text = text.replace('\\"c1\\"', f'\\"{claim}\\"')
    text = text.replace("system:serviceaccount:authz-ref:claim-writer", GANGQ)
    body = json.loads(text)
    body["details"]["name"] = claim
    return status.ApiError(body["code"], body["reason"], body["message"], details=body["details"])


def forbidden(verb: str, plural: str, namespace: str) -> status.ApiError:
    """What RBAC answers gangq's service account for a collection request it may not make,
    worded as in case 1-12."""
    message = (
        f'{plural} is forbidden: User "{GANGQ}" cannot {verb} resource "{plural}" in API '
        f'group "" in the namespace "{namespace}"'
    )
    return status.ApiError(403, "Forbidden", message, details={"kind": plural})
