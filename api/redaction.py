"""What a viewer may read of text that names jobs: other tenants' jobs lose their names.

Pending reasons and history entries are written once for everyone ("preempted by
inference/prod-model (tier prod-inference > training)"). At the API edge, for a caller who is
not an admin, every job key `namespace/name` whose namespace the caller may not read becomes
"a job of another tenant" ("a higher-tier job of another tenant" after "preempted by"), and a
run of them becomes a count. It must not change the stored text: admins read it as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gangq.api import auth

OTHER = "a job of another tenant"
HIGHER_TIER = "a higher-tier job of another tenant"
_NAME = r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?"
# A scale-up gang's key is its job's with `+<first replica>` (PRODUCT §5): the suffix goes too.
_ENTRY = rf"{_NAME}(?:\+[0-9]+)?"
# A job key stands alone: a device id (driver/pool/device) has a third part, a fraction
# ("12/16") has no letter; both are left as they are.
_KEY = re.compile(rf"(?<![\w./-])(preempted by )?({_NAME})/({_ENTRY})(?![\w/-])")
_RUN = re.compile(rf"{OTHER}(?:(?:, | and ){OTHER})+")

Redact = Callable[[str], str]


def identity(text: str) -> str:
    return text


def for_viewer(
    principal: auth.Principal, *, tenant_of: Callable[[str], str | None], own_namespace: str = ""
) -> Redact:
    """The text rewrite for `principal`; admins (who read every tenant) get names unchanged."""
    if principal.is_admin:
        return identity

    def is_readable(namespace: str) -> bool:
        if namespace == own_namespace:
            return True
        tenant = tenant_of(namespace)
        return tenant is not None and principal.can_read_tenant(tenant)

    def replace(match: re.Match[str]) -> str:
        after, namespace, name = match.groups()
        if is_readable(namespace) or (namespace.isdigit() and name.isdigit()):
            return match.group(0)
        return f"preempted by {HIGHER_TIER}" if after else OTHER

    def redact(text: str) -> str:
        hidden = _KEY.sub(replace, text)
        return _RUN.sub(lambda run: f"{run.group(0).count(OTHER)} jobs of other tenants", hidden)

    return redact


def details(value: Any, redact: Redact) -> Any:
    """Every string inside an event's details, rewritten."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: details(item, redact) for key, item in value.items()}
    if isinstance(value, list):
        return [details(item, redact) for item in value]
    return value
