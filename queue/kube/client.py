"""A JSON client for the Kubernetes API on top of kubernetes-asyncio's `ApiClient`.

Owns requests and watch streams as plain dicts (the shapes the core's builders read), the
mapping of failure responses to `KubeError` and the patch content types. It must not retry
(that is `retry.py`) or know what the objects mean.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from gangq.queue.core.errors import GangqError
from gangq.queue.kube.resources import Resource

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_AUTH = ["BearerToken"]


class KubeError(GangqError):
    """A request the API server refused or that could not reach it (`status` 0); `resource`
    is the plural the request path named ("" when unknown)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        retry_after_s: float | None = None,
        resource: str = "",
    ) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s
        self.resource = resource


def resource_of(path: str) -> str:
    """The plural a request path names: "pods" of /api/v1/namespaces/ns/pods/x/status."""
    parts = [part for part in path.partition("?")[0].split("/") if part]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return rest[0] if rest else ""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    try:
        return None if value is None else max(float(value), 0.0)
    except ValueError:
        return None


class Kube:
    """`await kube.get(PODS, "ns", "name")`; every method returns or takes JSON dicts."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout_s: float | None = 30.0,
    ) -> aiohttp.ClientResponse:
        try:
            response: aiohttp.ClientResponse = await self.api_client.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=_AUTH,
                _preload_content=False,
                _request_timeout=timeout_s,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise KubeError(
                0, f"{method} {path}: {error or type(error).__name__}", resource=resource_of(path)
            ) from error
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        response = await self._send(method, path, body=body, query=query, content_type=content_type)
        try:
            text = await response.text()
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise KubeError(
                0, f"{method} {path}: {error or type(error).__name__}", resource=resource_of(path)
            ) from error
        finally:
            response.release()
        try:
            parsed = json.loads(text) if text else {}
        except json.JSONDecodeError:
            parsed = {"message": text.strip()}
        if not 200 <= response.status <= 299:
            message = parsed.get("message") if isinstance(parsed, dict) else None
            raise KubeError(
                response.status,
                f"{method} {path}: {message or text.strip() or response.reason}",
                retry_after_s=_retry_after(response.headers),
                resource=resource_of(path),
            )
        return parsed if isinstance(parsed, dict) else {}

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self, resource: Resource, *, query: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        return await self.request("GET", resource.path(), query=query)

    async def create(
        self, resource: Resource, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self.request("POST", resource.path(namespace), body=dict(body))

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        path = resource.path(namespace, name, subresource=subresource)
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(
        self, resource: Resource, namespace: str, name: str, *, grace_s: int | None = None
    ) -> dict[str, Any]:
        query = {} if grace_s is None else {"gracePeriodSeconds": str(grace_s)}
        return await self.request("DELETE", resource.path(namespace, name), query=query)

    async def watch(
        self, resource: Resource, *, resource_version: str, timeout_s: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (`{"type", "object"}`) until the server ends the stream."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        response = await self._send("GET", resource.path(), query=query, timeout_s=None)
        try:
            if response.status != 200:
                text = await response.text()
                raise KubeError(response.status, f"watch {resource.plural}: {text.strip()}")
            while True:
                try:
                    line = await response.content.readline()
                except (aiohttp.ClientError, OSError, TimeoutError) as error:
                    raise KubeError(0, f"watch {resource.plural} dropped: {error}") from error
                if not line:
                    return
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as error:
                        raise KubeError(0, f"watch {resource.plural}: bad line: {error}") from error
        finally:
            response.release()
