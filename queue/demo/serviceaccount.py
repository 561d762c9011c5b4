"""gangq's own identity in an emulated cluster: the ServiceAccount of deploy/ with exactly the
RBAC deploy/ ships (deploy/base/rbac.yaml, package data through the link queue/demo/rbac.yaml).

Owns applying those documents and minting the ServiceAccount's token, so a controller run
against the emulator is refused whatever a real cluster would refuse it. It must not grant
anything of its own: a permission the controller lacks belongs in deploy/base/rbac.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gangq.queue.kubesim.emulator import Emulator

NAMESPACE = "gangq-system"
NAME = "gangq"
USER = f"system:serviceaccount:{NAMESPACE}:{NAME}"


def shipped_rbac() -> list[dict[str, Any]]:
    """The ClusterRole, Role and bindings of deploy/base/rbac.yaml."""
    text = (Path(__file__).parent / "rbac.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def controller_token(cluster: Emulator) -> str:
    """Install gangq's namespace and RBAC (as the release manifest does) and return a token of
    its ServiceAccount."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    cluster.apply([namespace, *shipped_rbac()])
    return cluster.service_account_token(NAMESPACE, NAME)
