"""The HTTP surface: aiohttp routes that turn kube-apiserver requests into registry calls.

Owns URL parsing (/api/v1, /apis/<group>/<version>, namespaces, subresources, legacy /watch),
bearer-token authentication and the authorization of each request (`authorization.py`
decides), request bodies (JSON, apply YAML), Status responses, Warning headers,
watch streaming and fault injection. It must not hold Kubernetes semantics: those live in
`registry.py`, `listing.py`, `watch.py` and the per-kind strategies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import yaml
from aiohttp import web

from gangq.queue.kubesim import (
    authorization,
    deletion,
    discovery,
    kinds,
    listing,
    openapi,
    patch,
    requestinfo,
    selectors,
    status,
    tables,
    watch,
)
from gangq.queue.kubesim.faults import Faults
from gangq.queue.kubesim.podlogs import PodLogs
from gangq.queue.kubesim.registry import Registry
from gangq.queue.kubesim.requests import RequestCounts
from gangq.queue.kubesim.tokenreview import TokenReviews
from gangq.queue.kubesim.validation import pods

log = logging.getLogger(__name__)
_BOOLEAN_PARAMETERS = frozenset({"watch", "allowWatchBookmarks", "sendInitialEvents"})
_METRIC_VERBS = {"create": "POST", "update": "PUT"}
"""kube-apiserver's verb label: the HTTP method, LIST, DELETECOLLECTION or APPLY."""
_PATCH_TYPES = (patch.MERGE_PATCH, patch.JSON_PATCH, patch.STRATEGIC_MERGE_PATCH, patch.APPLY_PATCH)


@dataclass(frozen=True, slots=True)
class Target:
    rt: kinds.ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def _json(body: Any, code: int, *, warnings: list[str] | None = None) -> web.Response:
    response = web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=code,
        content_type="application/json",
    )
    for warning in warnings or []:
        response.headers.add("Warning", f'299 - "{warning.replace(chr(34), chr(92) + chr(34))}"')
    return response


def _error(error: status.ApiError) -> web.Response:
    if error.text is not None:
        response = web.Response(text=error.text, status=error.code, content_type="text/plain")
    else:
        response = _json(error.body(), error.code)
    for key, value in error.headers.items():
        response.headers[key] = value
    return response


def _aggregated(request: web.Request, body: dict[str, Any]) -> web.Response:
    """Aggregated discovery with an ETag; a matching If-None-Match is a 304 (corpus 1-11)."""
    encoded = json.dumps(body, separators=(",", ":")).encode()
    etag = '"' + hashlib.sha512(encoded).hexdigest().upper() + '"'
    headers = {"ETag": etag, "Vary": "Accept", "Cache-Control": "public"}
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    content_type = discovery.AGGREGATED_V2
    return web.Response(body=encoded, status=200, headers=headers | {"Content-Type": content_type})


@dataclass(eq=False)
class ApiServer:
    registry: Registry
    faults: Faults
    authorizer: authorization.Authorizer
    token: str | None = None
    address: str = "127.0.0.1:6443"
    bookmark_interval: float = 60.0
    requests: RequestCounts = field(default_factory=RequestCounts)
    token_reviews: TokenReviews = field(default_factory=TokenReviews)
    logs: PodLogs = field(default_factory=PodLogs)

    def application(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            user = self._authenticate(request)
            attributes = requestinfo.parse(request.method, request.path, request.query)
            if user is not None:
                self._authorize(user, attributes)
            token = authorization.serving(
                authorization.Request(user or authorization.ADMIN, attributes, self.authorizer)
            )
            try:
                return await self._route(request, attributes)
            finally:
                authorization.done(token)
        except status.ApiError as error:
            return _error(error)
        except ConnectionResetError:
            # The client went away mid-request (a killed controller): nobody is left to answer,
            # and aiohttp drops a response it cannot send without logging an error.
            return web.Response(status=499, reason="Client Closed Request")
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            # Input the emulator does not anticipate: answer like the real server's panic
            # recovery instead of dropping the connection.
            log.warning("%s %s failed: %r", request.method, request.path, error)
            return _error(status.internal_error(f"Internal error occurred: {error!r}"))

    def _authenticate(self, request: web.Request) -> authorization.User | None:
        """Who sent the request; None when the emulator runs without a token (no
        authentication and no authorization, like an insecure port)."""
        if self.token is None:
            return None
        header = request.headers.get("Authorization", "")
        if not header:
            return authorization.ANONYMOUS
        bearer = header.removeprefix("Bearer ")
        if header == f"Bearer {self.token}":
            return authorization.ADMIN
        identity = self.token_reviews.authenticate(bearer) if bearer != header else None
        if identity is None:
            raise status.ApiError(401, "Unauthorized", "Unauthorized")
        groups = (*identity.groups, authorization.AUTHENTICATED)
        return authorization.User(identity.user, groups)

    def _authorize(self, user: authorization.User, attributes: requestinfo.Attributes) -> None:
        self.authorizer.record(user, attributes)
        decision = self.authorizer.authorize(user, attributes)
        if not decision.allowed:
            raise authorization.forbidden(user, attributes, decision.reason)

    async def _route(
        self, request: web.Request, attributes: requestinfo.Attributes
    ) -> web.StreamResponse:
        parts = [part for part in request.path.split("/") if part]
        if parts == ["version"]:
            return _json(discovery.VERSION, 200)
        if parts == ["metrics"]:
            return web.Response(text=self.requests.exposition(), content_type="text/plain")
        if parts == ["apis", "authentication.k8s.io", "v1", "tokenreviews"]:
            return await self._token_review(request)
        types = list(self.registry.types.values())
        if parts[:1] == ["openapi"]:
            return self._openapi(request, parts[1:], types)
        aggregated = discovery.AGGREGATED_V2 in request.headers.get("Accept", "")
        if parts == ["api"]:
            if aggregated:
                return _aggregated(request, discovery.aggregated(types, core=True))
            return _json(discovery.api_versions(self.address), 200)
        if parts == ["apis"]:
            if aggregated:
                return _aggregated(request, discovery.aggregated(types, core=False))
            return _json(discovery.group_list(types), 200)
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 2 and parts[0] == "apis":
            versions = discovery.groups(types).get(parts[1])
            if versions is None or (len(parts) > 2 and parts[2] not in versions):
                raise status.ApiError(404, "NotFound", "", text="404 page not found\n")
            if len(parts) == 2:
                return _json(
                    {"kind": "APIGroup", "apiVersion": "v1"}
                    | discovery.api_group(parts[1], versions),
                    200,
                )
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise status.ApiError(404, "NotFound", "", text="404 page not found\n")
        served = [rt for rt in types if rt.group == group and rt.version == version]
        if not rest:
            gv = f"{group}/{version}" if group else version
            return _json(discovery.resource_list(gv, served), 200)
        return await self._resource(request, group, version, rest, verb=attributes.verb)

    @staticmethod
    def _openapi(
        request: web.Request, parts: list[str], types: list[kinds.ResourceType]
    ) -> web.Response:
        """OpenAPI v3 (index and group-version documents) and v2 as JSON; v2 in protobuf,
        all kubectl asks for by default, is not served (406 lets it fall back)."""
        if parts == ["v3"]:
            return _json(openapi.v3_index(types), 200)
        if parts[:1] == ["v3"]:
            document = openapi.v3_document(types, "/".join(parts[1:]))
            if document is not None:
                return _json(document, 200)
        if parts == ["v2"]:
            accept = request.headers.get("Accept", "")
            if openapi.PROTOBUF_V2 in accept and "json" not in accept and "*/*" not in accept:
                raise status.ApiError(406, "NotAcceptable", "only application/json is served")
            return _json(openapi.v2_document(types), 200)
        raise status.ApiError(404, "NotFound", "", text="404 page not found\n")

    async def _token_review(self, request: web.Request) -> web.Response:
        """A create-only virtual resource: nothing is stored, the answer carries the status."""
        if request.method != "POST":
            raise status.ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        self.faults.check("create", "tokenreviews", name="")
        delay = self.faults.delay_for("create", "tokenreviews")
        if delay:
            await asyncio.sleep(delay)
        try:
            body = json.loads(await request.read() or b"null")
        except json.JSONDecodeError as error:
            raise status.bad_request(f"the object provided is not valid JSON: {error}") from error
        return _json(self.token_reviews.review(body), 201)

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        def lookup(plural: str) -> kinds.ResourceType:
            rt = self.registry.resolve(group, version, plural)
            if rt is None:
                raise status.resource_not_found()
            return rt

        if rest[0] == "namespaces" and len(rest) >= 3:
            rt = self.registry.resolve(group, version, rest[2])
            if rt is not None and rt.namespaced:
                name = rest[3] if len(rest) > 3 else None
                return Target(rt, rest[1], name, rest[4] if len(rest) > 4 else None)
            if group == "" and rest[2] == "bindings" and len(rest) == 3:
                return Target(kinds.PODS, rest[1], None, "bindings")
            if rest[2] not in ("status", "finalize"):
                raise status.resource_not_found()
        rt = lookup(rest[0])
        if len(rest) > 3:
            raise status.resource_not_found()
        return Target(
            rt, None, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        )

    async def _resource(
        self, request: web.Request, group: str, version: str, rest: list[str], *, verb: str
    ) -> web.StreamResponse:
        """Serve `verb`, the one authorization decided on (`requestinfo.parse`): one reading
        of the request, so what is served is what was authorized."""
        target = self._target(group, version, rest[1:] if rest[0] == "watch" else rest)
        query = {
            key: value.lower() if key in _BOOLEAN_PARAMETERS else value
            for key, value in request.query.items()
        }
        is_watch = verb == "watch"
        self.faults.check(verb, target.rt.plural, name=target.name or "")
        delay = self.faults.delay_for(verb, target.rt.plural)
        if delay:
            await asyncio.sleep(delay)
        if is_watch:
            return await self._watch(request, target, query)
        counted = _METRIC_VERBS.get(verb, verb.upper())
        if verb == "patch" and request.content_type == patch.APPLY_PATCH:
            counted = "APPLY"
        try:
            response = await self._dispatch(request, target, verb, query)
        except status.ApiError as error:
            self._count(target, counted, error.code)
            raise
        self._count(target, counted, response.status)
        return response

    def _count(self, target: Target, verb: str, code: int) -> None:
        self.requests.count(
            verb=verb, resource=target.rt.plural, subresource=target.subresource or "", code=code
        )

    async def _body(self, request: web.Request, rt: kinds.ResourceType) -> Any:
        raw = await request.read()
        if not raw:
            return None
        text = raw.decode("utf-8", errors="replace")
        if request.content_type == patch.APPLY_PATCH:
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as error:
                raise status.bad_request(f"error decoding YAML: {error}") from error
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            snippet = text[:30] + " ..." if len(text) > 30 else text
            raise status.bad_request(
                f"the object provided is unrecognized (must be of type {rt.kind}): "
                "couldn't get version/kind; "
                f"json parse error: unexpected end of JSON input ({snippet})"
            ) from error

    async def _dispatch(
        self, request: web.Request, target: Target, verb: str, query: dict[str, str]
    ) -> web.StreamResponse:
        if verb == "get" and target.rt.key == kinds.PODS.key and target.subresource == "log":
            pod = self.registry.get(kinds.PODS, target.namespace or "", target.name or "")
            text = self.logs.read(pod, request.query)
            return web.Response(text=text, status=200, content_type="text/plain")
        if verb in ("list", "get"):
            return self._read(request, target, verb, query)
        body = await self._body(request, target.rt)
        if verb in ("delete", "deletecollection"):
            return _json(self._delete(target, query, body), 200)
        rt, namespace, name = target.rt, target.namespace or "", target.name
        strict = query.get("fieldValidation") == "Strict"
        if verb == "create":
            if target.subresource is not None or name is not None:
                return _json(self._subresource_post(target, body), 201)
            written = self.registry.create(
                rt, namespace, body, dry_run="dryRun" in query, strict=strict
            )
            return _json(written.object, 201, warnings=written.warnings)
        assert name is not None
        if verb == "update":
            written = self.registry.update(
                rt, namespace, name, body, subresource=target.subresource, strict=strict
            )
            return _json(written.object, 200, warnings=written.warnings)
        if request.content_type not in _PATCH_TYPES:
            raise status.unsupported_media_type("415: Unsupported Media Type", details=True)
        written = self.registry.patch(
            rt,
            namespace,
            name,
            request.content_type,
            body,
            subresource=target.subresource,
            field_manager=query.get("fieldManager"),
            strict=strict,
        )
        return _json(written.object, 201 if written.created else 200, warnings=written.warnings)

    def _read(
        self, request: web.Request, target: Target, verb: str, query: dict[str, str]
    ) -> web.Response:
        rt, registry = target.rt, self.registry
        if verb == "list":
            scope = target.namespace if rt.namespaced else None
            result = listing.list_objects(
                rt, registry.storage, query, namespace=scope, present=registry.strategy(rt).present
            )
        else:
            assert target.name is not None
            found = registry.get(rt, target.namespace or "", target.name)
            result = {"metadata": found["metadata"], "items": [found]}
        if tables.ACCEPT in request.headers.get("Accept", ""):
            include = query.get("includeObject", "Metadata")
            table = tables.as_table(rt, result, include_object=include, now=registry.clock())
            return _json(table, 200)
        return _json(result if verb == "list" else result["items"][0], 200)

    def _delete(self, target: Target, query: dict[str, str], body: Any) -> dict[str, Any]:
        rt, registry = target.rt, self.registry
        options = self._delete_options(query, body)
        if target.name is not None:
            return deletion.delete(registry, rt, target.namespace or "", target.name, options)
        scope = target.namespace if rt.namespaced else None
        selection = listing.parse_filter(rt, scope, query)
        deleted = []
        for obj in [o for o in registry.storage.items(rt.store_key, scope) if selection.matches(o)]:
            answer = deletion.delete(
                registry,
                rt,
                obj["metadata"].get("namespace") or "",
                obj["metadata"]["name"],
                options,
            )
            # A kind whose DELETE answers a Status still lists the object it removed (10-40).
            deleted.append(obj if answer.get("kind") == "Status" else answer)
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(registry.storage.resource_version)},
            "items": deleted,
        }

    def _subresource_post(self, target: Target, body: Any) -> dict[str, Any]:
        if target.rt.key != kinds.PODS.key or target.subresource not in (
            "binding",
            "bindings",
            "eviction",
        ):
            raise status.ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
                details={},
            )
        namespace = target.namespace or ""
        body = body if isinstance(body, dict) else {}
        if target.subresource == "eviction":
            assert target.name is not None
            pods.evict(self.registry, namespace, target.name)
            return status.success(201)
        name = target.name or str((body.get("metadata") or {}).get("name") or "")
        node = str((body.get("target") or {}).get("name") or "")
        pods.bind(self.registry, namespace, name, node)
        return status.success(201)

    @staticmethod
    def _delete_options(query: dict[str, str], body: Any) -> deletion.DeleteOptions:
        options = body if isinstance(body, dict) else {}
        propagation = query.get("propagationPolicy") or options.get("propagationPolicy")
        if propagation is None and options.get("orphanDependents") is not None:
            propagation = "Orphan" if options["orphanDependents"] else "Background"
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        if grace is not None and not str(grace).lstrip("-").isdigit():
            raise status.bad_request(f'invalid value for gracePeriodSeconds: "{grace}"')
        preconditions = options.get("preconditions") or {}
        return deletion.DeleteOptions(
            propagation=propagation,
            grace_seconds=None if grace is None else int(grace),
            uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"),
            dry_run="dryRun" in query or bool(options.get("dryRun")),
        )

    async def _watch(
        self, request: web.Request, target: Target, query: dict[str, str]
    ) -> web.StreamResponse:
        rt = target.rt
        listing.check_resource_version(query, self.registry.storage, watch=True)
        scope = target.namespace if rt.namespaced else None
        selection = listing.parse_filter(rt, scope, query)
        if target.name is not None:
            named = selectors.FieldRequirement("metadata.name", target.name, negated=False)
            selection = listing.Filter(
                selection.namespace, selection.labels, [*selection.fields, named]
            )
        options = watch.WatchOptions.from_query(query, bookmark_interval=self.bookmark_interval)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        present = self.registry.strategy(rt).present

        async def send(events: list[dict[str, Any]]) -> None:
            await response.write(
                b"".join(
                    watch.encode(
                        event
                        if event["type"] in (watch.BOOKMARK, watch.ERROR)
                        else {"type": event["type"], "object": present(event["object"])}
                    )
                    for event in events
                )
            )

        with contextlib.suppress(ConnectionResetError):
            # The client went away (even before the stream started, e.g. during an injected
            # delay): nothing left to tell it.
            await response.prepare(request)
            await watch.stream(rt, self.registry.storage, selection, options, send)
            await response.write_eof()
        return response
