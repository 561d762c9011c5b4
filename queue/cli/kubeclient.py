"""Connecting a command to a Kubernetes cluster, the way kubectl and the in-cluster Deployment do.

Shared by `gangq run` and `gangq logs`; kubernetes-asyncio loads only when a command connects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gangq.queue.core.errors import InvalidInputError


async def api_client(kubeconfig: Path | None) -> Any:
    """In-cluster credentials when no kubeconfig is named and they exist, else the kubeconfig
    (`kubeconfig`, else $KUBECONFIG or ~/.kube/config), as kubectl chooses."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config.config_exception import ConfigException

    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return client.ApiClient()
        except ConfigException:
            pass
    configuration = client.Configuration()
    try:
        await config.load_kube_config(
            config_file=None if kubeconfig is None else str(kubeconfig),
            client_configuration=configuration,
        )
    except (ConfigException, OSError) as error:
        raise InvalidInputError(
            f"cannot read kubeconfig {kubeconfig or '(default)'}: {error}"
        ) from error
    return client.ApiClient(configuration)
