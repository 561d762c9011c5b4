"""TokenReview (`authentication.k8s.io/v1`): tokens the emulator issued, reviewed as
kube-apiserver reviews them.

Owns the tokens handed out by `issue` (a user, groups and the audiences a projected
service-account token is bound to) and the answer to a review: `status.audiences` is the
intersection of the token's audiences with the requested ones (the API server's own audience
when the spec names none); a token that is unknown or meant for other audiences is not
authenticated and says why in `status.error`. The API server authenticates bearer tokens sent
to itself the same way (`authenticate`, its own audiences). It must not know HTTP: `server.py`
routes the POST here.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.kubesim import status

API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
"""kube-apiserver's default `--api-audiences`: what a token with no audience is for."""
API_VERSION = "authentication.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    groups: tuple[str, ...]
    audiences: tuple[str, ...]
    uid: str = field(default_factory=lambda: secrets.token_hex(8))


@dataclass(eq=False)
class TokenReviews:
    api_audiences: tuple[str, ...] = (API_AUDIENCE,)
    audience_aware: bool = True
    """False answers like an authenticator that ignores audiences (legacy secret tokens, some
    webhooks): any known token is authenticated, `status.audiences` naming its own."""
    _tokens: dict[str, Identity] = field(default_factory=dict)
    reviewed: int = 0
    """How many reviews were answered, so a test can see what a client's cache saved."""

    def issue(
        self, user: str, *, groups: tuple[str, ...] = (), audiences: tuple[str, ...] = ()
    ) -> str:
        """A new bearer token for `user`, bound to `audiences` (the API server's when empty),
        as the TokenRequest API returns for a projected service-account token."""
        token = secrets.token_urlsafe(32)
        self._tokens[token] = Identity(user, groups, audiences or self.api_audiences)
        return token

    def authenticate(self, token: str) -> Identity | None:
        """Who a bearer token sent to the API server itself is: a token it issued for one of
        its own audiences (`--api-audiences`)."""
        identity = self._tokens.get(token)
        if identity is None:
            return None
        if self.audience_aware and not set(identity.audiences) & set(self.api_audiences):
            return None
        return identity

    def review(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("kind") not in (None, "TokenReview"):
            raise status.bad_request("the object provided is not a TokenReview")
        spec = body.get("spec") or {}
        token = spec.get("token") or ""
        if not token:
            raise status.bad_request("token is required for TokenReview in authentication")
        wanted = tuple(spec.get("audiences") or ()) or self.api_audiences
        self.reviewed += 1
        identity = self._tokens.get(token)
        result: dict[str, Any] = {"user": {}}
        if identity is None:
            result["error"] = "[invalid bearer token, token lookup failed]"
        elif self.audience_aware and not set(identity.audiences) & set(wanted):
            result["error"] = (
                f"[invalid bearer token, token audiences {json.dumps(list(identity.audiences))} "
                f"is invalid for the target audiences {json.dumps(list(wanted))}]"
            )
        else:
            result = {
                "authenticated": True,
                "user": {
                    "username": identity.user,
                    "uid": identity.uid,
                    "groups": [*identity.groups, "system:authenticated"],
                },
                "audiences": [a for a in wanted if a in identity.audiences]
                if self.audience_aware
                else list(identity.audiences),
            }
        return {
            "kind": "TokenReview",
            "apiVersion": API_VERSION,
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": result,
        }
