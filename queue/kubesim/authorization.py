"""Authorization as kube-apiserver does it with `--authorization-mode=Node,RBAC`: the
privileged group system:masters, then the RBAC objects in storage.

Owns who a request is (`User`), the RBAC rule matching (verbs, API groups, resources and
`*/subresource`, resourceNames, non-resource URLs, `*` wildcards) over ClusterRoleBindings and
the RoleBindings of the request's namespace, the 403 Status and its message as
responsewriters.Forbidden writes it, the bootstrap roles every cluster has for discovery, and
the record of what each user asked for. The DRA status rule (`binding_causes`) authorizes a
synthetic `resourceclaims/binding` request from inside validation, as the real strategy does
from the request context. It must not parse HTTP (`requestinfo.py` does).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import kinds, status
from gangq.queue.kubesim.requestinfo import Attributes

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RBAC_GROUP = "rbac.authorization.k8s.io"
_SANITIZE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()


ANONYMOUS = User("system:anonymous", (UNAUTHENTICATED,))
ADMIN = User("kubernetes-admin", (MASTERS, AUTHENTICATED))
"""Who the emulator's admin token is: unrestricted, as system:masters is."""


def service_account(namespace: str, name: str) -> User:
    """The user a ServiceAccount token authenticates as (without system:authenticated,
    which authentication adds to every user)."""
    return User(
        f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
    )


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""
    """Why RBAC could not decide on everything (a binding naming a missing role)."""


@dataclass(eq=False)
class Authorizer:
    registry: Registry
    requested: dict[str, set[Attributes]] = field(default_factory=dict)
    """What each user asked for, by user name: resource requests without their object name
    (verb, group, resource, subresource, namespace), non-resource requests with their path."""

    def record(self, user: User, attributes: Attributes) -> None:
        kept = replace(attributes, name="", path="") if attributes.resource_request else attributes
        self.requested.setdefault(user.name, set()).add(kept)

    def authorize(self, user: User, attributes: Attributes) -> Decision:
        if MASTERS in user.groups:
            return Decision(True)
        errors: list[str] = []
        for rules in self._rule_sets(user, attributes.namespace, errors):
            if any(rule_allows(rule, attributes) for rule in rules):
                return Decision(True)
        unique = list(dict.fromkeys(errors))
        if not unique:
            return Decision(False)
        joined = unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
        return Decision(False, f"RBAC: {joined}")

    def _rule_sets(
        self, user: User, namespace: str, errors: list[str]
    ) -> Iterator[list[dict[str, Any]]]:
        """ClusterRoleBindings first, then the RoleBindings of the namespace (as RBAC's
        VisitRulesFor); each binding that names the user yields its role's rules."""
        storage = self.registry.storage
        for binding in storage.items(kinds.CLUSTER_ROLE_BINDINGS.store_key):
            if _applies(binding, user, ""):
                yield self._role_rules(binding.get("roleRef") or {}, "", errors)
        if namespace:
            for binding in storage.items(kinds.ROLE_BINDINGS.store_key, namespace):
                if _applies(binding, user, namespace):
                    yield self._role_rules(binding.get("roleRef") or {}, namespace, errors)

    def _role_rules(
        self, ref: dict[str, Any], namespace: str, errors: list[str]
    ) -> list[dict[str, Any]]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ClusterRole":
            role = self.registry.storage.peek(kinds.CLUSTER_ROLES.store_key, "", name)
        elif kind == "Role":
            role = self.registry.storage.peek(kinds.ROLES.store_key, namespace, name)
        else:
            errors.append(f'unsupported role reference kind: "{kind}"')
            return []
        if role is None:
            errors.append(f'{str(kind).lower()}.{RBAC_GROUP} "{name}" not found')
            return []
        return [rule for rule in role.get("rules") or [] if isinstance(rule, dict)]


def _applies(binding: dict[str, Any], user: User, namespace: str) -> bool:
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "User" and name == user.name:
            return True
        if kind == "Group" and name in user.groups:
            return True
        if kind == "ServiceAccount":
            owner = subject.get("namespace") or namespace
            if owner and user.name == f"{SERVICE_ACCOUNT_PREFIX}{owner}:{name}":
                return True
    return False


def rule_allows(rule: dict[str, Any], attributes: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attributes.verb not in verbs:
        return False
    if not attributes.resource_request:
        return any(
            url in ("*", attributes.path)
            or (url.endswith("*") and attributes.path.startswith(url.rstrip("*")))
            for url in rule.get("nonResourceURLs") or []
        )
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attributes.api_group not in groups:
        return False
    sub = attributes.subresource
    if not any(
        resource in ("*", attributes.combined_resource) or (sub and resource == f"*/{sub}")
        for resource in rule.get("resources") or []
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attributes.name in names


def forbidden(user: User, attributes: Attributes, reason: str = "") -> status.ApiError:
    """The 403 of responsewriters.Forbidden (apierrors.NewForbidden around its message)."""
    message = _forbidden_message(user, attributes).translate(_SANITIZE)
    if reason:
        message = f"{message}: {reason}"
    if not attributes.resource_request or not attributes.resource:
        return status.ApiError(403, "Forbidden", f"forbidden: {message}", details={})
    group, resource, name = attributes.api_group, attributes.resource, attributes.name
    qualified = f"{resource}.{group}" if group else resource
    details: dict[str, Any] = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = resource
    named = f' "{name}"' if name else ""
    return status.ApiError(
        403, "Forbidden", f"{qualified}{named} is forbidden: {message}", details=details
    )


def _forbidden_message(user: User, attributes: Attributes) -> str:
    who = f'User "{user.name}"'
    if not attributes.resource_request:
        return f'{who} cannot {attributes.verb} path "{attributes.path}"'
    what = (
        f'{who} cannot {attributes.verb} resource "{attributes.combined_resource}" '
        f'in API group "{attributes.api_group}"'
    )
    if attributes.namespace:
        return f'{what} in the namespace "{attributes.namespace}"'
    return f"{what} at the cluster scope"


# --- the request being served ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """Who asks for what, and who decides: what kube-apiserver keeps in a request's context."""

    user: User
    attributes: Attributes
    authorizer: Authorizer


_CURRENT: contextvars.ContextVar[Request | None] = contextvars.ContextVar(
    "kubesim_request", default=None
)


def serving(request: Request) -> contextvars.Token[Request | None]:
    """Make `request` the one validation sees until `done(token)`; writes of the emulator's
    own controllers (scheduler, kubelets) run outside any request and are not checked."""
    return _CURRENT.set(request)


def done(token: contextvars.Token[Request | None]) -> None:
    _CURRENT.reset(token)


def binding_causes(new: dict[str, Any], old: dict[str, Any]) -> list[status.Cause]:
    """Since 1.36 (DRAResourceClaimGranularStatusAuthorization, beta, on) a status write that
    changes `allocation` or `reservedFor` also needs the request's verb on the synthetic
    `resourceclaims/binding`, cluster-wide and for every name (corpus 11-01, 11-02)."""
    request = _CURRENT.get()
    if request is None:
        return []
    if all(
        (new.get(key) or None) == (old.get(key) or None) for key in ("allocation", "reservedFor")
    ):
        return []
    attributes = replace(request.attributes, subresource="binding", namespace="", name="")
    request.authorizer.record(request.user, attributes)
    decision = request.authorizer.authorize(request.user, attributes)
    if decision.allowed:
        return []
    refusal = forbidden(request.user, attributes, decision.reason)
    return [
        status.forbidden(
            "status.allocation",
            'changing status.allocation or status.reservedFor requires resource="resourceclaims/'
            f'binding", verb="{attributes.verb}" permission: {refusal.message}',
        )
    ]


# --- bootstrap policy -----------------------------------------------------------------------

_BOOTSTRAP_METADATA = {
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
}
_PUBLIC_INFO = ["/livez", "/readyz", "/healthz", "/version", "/version/"]
_BOOTSTRAP_ROLES: dict[str, tuple[list[dict[str, Any]], tuple[str, ...]]] = {
    "system:basic-user": (
        [
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["selfsubjectreviews"],
                "verbs": ["create"],
            },
        ],
        (AUTHENTICATED,),
    ),
    "system:discovery": (
        [
            {
                "nonResourceURLs": [
                    *_PUBLIC_INFO,
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
                "verbs": ["get"],
            }
        ],
        (AUTHENTICATED,),
    ),
    "system:public-info-viewer": (
        [{"nonResourceURLs": _PUBLIC_INFO, "verbs": ["get"]}],
        (AUTHENTICATED, UNAUTHENTICATED),
    ),
}
"""The roles of plugin/pkg/auth/authorizer/rbac/bootstrappolicy that every user gets."""


def bootstrap(registry: Registry) -> None:
    """Create the bootstrap ClusterRoles and their ClusterRoleBindings, as the RBAC post-start
    hook of kube-apiserver does on an empty cluster."""
    for name, (rules, groups) in _BOOTSTRAP_ROLES.items():
        metadata = {"name": name} | _BOOTSTRAP_METADATA
        registry.create(kinds.CLUSTER_ROLES, "", {"metadata": metadata, "rules": rules})
        subjects = [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group} for group in groups]
        ref = {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name}
        registry.create(
            kinds.CLUSTER_ROLE_BINDINGS,
            "",
            {"metadata": metadata, "roleRef": ref, "subjects": subjects},
        )
