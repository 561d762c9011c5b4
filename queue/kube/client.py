"""A JSON client for the Kubernetes API on top of kubernetes-asyncio's `ApiClient`.

Owns requests and watch streams as plain dicts (the shapes the core's builders read), the
mapping of failure responses to `KubeError` and the patch content types. It must not retry
(that is `retry.py`) or know what the objects mean.

Requests go out through an aiohttp session of its own that shares the `ApiClient`'s
connection pool and TLS settings, but reads no environment per request (kubernetes-asyncio's
session has `trust_env`, which re-reads ~/.netrc in a thread for every request): the proxy
from the environment is looked up once, and the typed models and parameter sanitizing of
`call_api` are skipped, since every body here is plain JSON already. It keeps no cookies, as
client-go's transport has no cookie jar: the API server sets none, and a jar is consulted at
every request and answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pydantic_core
from aiohttp import helpers
from kubernetes_asyncio import client
from yarl import URL

from gangq.queue.core.errors import GangqError
from gangq.queue.kube.resources import Resource

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
USER_AGENT = "gangq"
REQUESTS_IN_FLIGHT = 16
"""Requests sent at once (watches and urgent ones aside): a burst waits here rather than in
the API server's queue, so an urgent request (a gang's release) meets a short queue there."""
READ_BUFFER = 2**21
"""Large reads: lists and watch events of big objects (ResourceSlices of many devices) come
in fewer pieces than with aiohttp's default buffer of 64 KiB."""
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30.0)
WATCH_TIMEOUT = aiohttp.ClientTimeout(total=None)
"""A watch lasts as long as the server keeps it open (its `timeoutSeconds`)."""
Objects = list[dict[str, Any]]
"""Objects as the API server sends them (named here: `Kube.list` shadows the builtin there)."""


def _decode(raw: bytes) -> Any:
    """JSON from the API server, parsed by pydantic's Rust parser: about 1.6 times faster than
    `json.loads` on the objects watches carry, a cost paid ~15 times per job. ValueError
    when it is not JSON."""
    return pydantic_core.from_json(raw)


def _encode(body: Any) -> bytes:
    """A compact UTF-8 JSON body (about 3 times faster than `json.JSONEncoder` on objects
    like pods and claims)."""
    return pydantic_core.to_json(body)


@dataclass(frozen=True, slots=True)
class Cause:
    """One field error of a refusal (`details.causes` of the Status): the field path the API
    server names ("spec.containers[0].image", "status.allocation") and what it says of it."""

    field: str
    message: str


class KubeError(GangqError):
    """A request the API server refused or that could not reach it (`status` 0); `resource`
    is the plural the request path named ("" when unknown), `reason` the Status's reason
    ("AlreadyExists", "Conflict"... "" when the answer was no Status), `causes` its field
    errors."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        retry_after_s: float | None = None,
        resource: str = "",
        reason: str = "",
        causes: tuple[Cause, ...] = (),
    ) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s
        self.resource = resource
        self.reason = reason
        self.causes = causes


def _causes(status: Mapping[str, Any]) -> tuple[Cause, ...]:
    details = status.get("details")
    found = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(found, list):
        return ()
    return tuple(
        Cause(str(c.get("field") or ""), str(c.get("message") or ""))
        for c in found
        if isinstance(c, dict)
    )


def resource_of(path: str) -> str:
    """The plural a request path names: "pods" of /api/v1/namespaces/ns/pods/x/status."""
    parts = [part for part in path.partition("?")[0].split("/") if part]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return rest[0] if rest else ""


def _unreachable(method: str, path: str, error: BaseException) -> KubeError:
    """A request that got no answer (status 0): the connection failed or timed out."""
    return KubeError(
        0, f"{method} {path}: {error or type(error).__name__}", resource=resource_of(path)
    )


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
        self.configuration = api_client.configuration
        self.host = str(self.configuration.host).rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None
        self._proxy: str | None = self.configuration.proxy
        if self._proxy is None:
            try:
                found, _ = helpers.get_env_proxy_for_url(URL(self.host))
                self._proxy = str(found)
            except LookupError:
                self._proxy = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            pool = self.api_client.rest_client.pool_manager
            self._session = aiohttp.ClientSession(
                connector=pool.connector,
                connector_owner=False,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                read_bufsize=READ_BUFFER,
            )
        return self._session

    async def close(self) -> None:
        """Close the session (the connection pool stays the `ApiClient`'s to close)."""
        if self._session is not None:
            await self._session.close()

    async def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        headers["User-Agent"] = USER_AGENT
        for setting in (await self.configuration.auth_settings()).values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        limits: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
    ) -> aiohttp.ClientResponse:
        # Paths are built from object names and the query by urlencode: already encoded.
        url = URL(self.host + path + (f"?{urlencode(query)}" if query else ""), encoded=True)
        data = None if body is None else _encode(body)
        try:
            return await self._client().request(
                method,
                url,
                data=data,
                headers=await self._headers(content_type),
                proxy=self._proxy,
                server_hostname=self.configuration.tls_server_name,
                timeout=limits,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise _unreachable(method, path, error) from error

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        urgent: bool = False,
    ) -> dict[str, Any]:
        """One request and the API server's answer as a dict."""
        raw = await self._call(method, path, body, query, content_type, urgent=urgent)
        try:
            parsed = _decode(raw) if raw else {}
        except ValueError:
            return {"message": raw.decode("utf-8", errors="replace").strip()}
        return parsed if isinstance(parsed, dict) else {}

    async def _call(
        self,
        method: str,
        path: str,
        body: Any,
        query: Mapping[str, str] | None,
        content_type: str,
        *,
        urgent: bool,
    ) -> bytes:
        """The answer's raw body; `urgent` requests skip the in-flight limit (see
        REQUESTS_IN_FLIGHT). Writes whose answer nobody reads stop here: decoding the whole
        object the API server sends back costs more than the request's own setup."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(REQUESTS_IN_FLIGHT)
        async with contextlib.nullcontext() if urgent else self._slots:
            response = await self._send(
                method, path, body=body, query=query, content_type=content_type
            )
            try:
                raw = await response.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                raise _unreachable(method, path, error) from error
            finally:
                response.release()
        if 200 <= response.status <= 299:
            return raw
        text = raw.decode("utf-8", errors="replace")
        try:
            parsed = _decode(raw) if raw else {}
        except ValueError:
            parsed = {}
        found = parsed if isinstance(parsed, dict) else {}
        message = found.get("message")
        raise KubeError(
            response.status,
            f"{method} {path}: {message or text.strip() or response.reason}",
            retry_after_s=_retry_after(response.headers),
            resource=resource_of(path),
            reason=str(found.get("reason") or ""),
            causes=_causes(found),
        )

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self, resource: Resource, *, query: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        return await self.request("GET", resource.path(), query=query)

    async def create(
        self, resource: Resource, namespace: str, body: Mapping[str, Any], *, urgent: bool = False
    ) -> None:
        """The created object comes back through the watch; the answer is not decoded (a
        caller that needs it sends the POST through `request`)."""
        path = resource.path(namespace)
        await self._call("POST", path, dict(body), None, "application/json", urgent=urgent)

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
        urgent: bool = False,
    ) -> None:
        """The patched object comes back through the watch; the answer is not decoded."""
        path = resource.path(namespace, name, subresource=subresource)
        await self._call("PATCH", path, body, None, content_type, urgent=urgent)

    async def delete(
        self, resource: Resource, namespace: str, name: str, *, grace_s: int | None = None
    ) -> None:
        query = {} if grace_s is None else {"gracePeriodSeconds": str(grace_s)}
        await self._call(
            "DELETE", resource.path(namespace, name), None, query, "application/json", urgent=False
        )

    async def delete_collection(
        self, resource: Resource, namespace: str, *, label_selector: str
    ) -> Objects:
        """One request for every object of the namespace the selector matches; the answer
        lists them as the API server deleted them (an object a finalizer keeps shows its
        deletionTimestamp). The server reads them at the request, not from a watch cache."""
        query = {"labelSelector": label_selector}
        answer = await self.request("DELETE", resource.path(namespace), query=query)
        items = answer.get("items")
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

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
        response = await self._send("GET", resource.path(), query=query, limits=WATCH_TIMEOUT)
        try:
            if response.status != 200:
                text = await response.text()
                raise KubeError(response.status, f"watch {resource.plural}: {text.strip()}")
            lines = stream_lines(response.content, what=f"watch {resource.plural}")
            async with contextlib.aclosing(lines):
                async for line in lines:
                    if not line.strip():
                        continue
                    try:
                        event = _decode(line)
                    except ValueError as error:
                        raise KubeError(0, f"watch {resource.plural}: bad line: {error}") from error
                    yield event
        finally:
            response.release()


async def stream_lines(content: aiohttp.StreamReader, *, what: str) -> AsyncGenerator[bytes, None]:
    """The lines of a stream, the last one unterminated or empty. Split here from what has
    arrived: aiohttp's `readline` appends a line piece by piece and waits once per line, which
    cost a watch more than decoding its events."""
    pieces: list[bytes] = []
    while True:
        try:
            chunk = await content.readany()
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise KubeError(0, f"{what} dropped: {error}") from error
        if not chunk:
            yield b"".join(pieces)
            return
        pieces.append(chunk)
        if b"\n" in chunk:
            *lines, rest = b"".join(pieces).split(b"\n")
            pieces = [rest] if rest else []
            for line in lines:
                yield line
