"""Per-kind rules plugged into the generic registry: defaults, validation, pruning, deletion.

Owns the `Strategy` base class whose hooks default to "anything goes"; each kind overrides only
what the real API server checks for it. A strategy must not write to storage: it inspects and
adjusts the object it is given and returns field errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import status
from gangq.queue.kubesim.validation import meta

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

NON_SPEC_KEYS = frozenset({"metadata", "status", "kind", "apiVersion"})


def fill_structs(obj: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> None:
    """Create each missing struct along `paths`; a leaf that is not a dict is left alone."""
    for path in paths:
        current = obj
        for key in path[:-1]:
            current = current.setdefault(key, {})
            if not isinstance(current, dict):
                break
        else:
            leaf = current.get(path[-1])
            if leaf is None:
                current[path[-1]] = {}


class Strategy:
    """Generic behaviour: every field kept, no validation beyond metadata."""

    tracks_generation = True
    returns_deleted_object = False
    status_applies_metadata = False
    """Pods: a /status write also applies label and annotation changes (corpus 2-34)."""
    dns_label_names = False
    empty_structs: tuple[tuple[str, ...], ...] = ()
    """Paths of Go struct fields the real server always serializes, as `{}` when unset
    (a Node created without spec reads back with `spec: {}`)."""

    def present(self, stored: dict[str, Any]) -> dict[str, Any]:
        """The API shape of a stored object (a view type converts; others return it as is)."""
        return stored

    def accept(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The stored shape of an object written through this type."""
        return obj

    def decode(self, obj: dict[str, Any]) -> None:
        """Reject what the real server cannot even decode (400 BadRequest)."""

    def prune(self, obj: dict[str, Any]) -> list[str]:
        """Drop unknown fields; returns their paths for `Warning` headers or strict mode."""
        return []

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        """Fill server-side defaults of a new object."""

    def normalize(self, obj: dict[str, Any]) -> None:
        """Canonical form after any write (e.g. an emptied list disappears)."""
        fill_structs(obj, self.empty_structs)

    def name_causes(self, obj: dict[str, Any]) -> list[status.Cause]:
        """What is wrong with a new object's name (most kinds need a DNS subdomain)."""
        return meta.name_causes(obj, dns_label=self.dns_label_names)

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        return []

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return []

    def validate_status_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return self.validate_update(new, old, registry)

    def admit(self, obj: dict[str, Any], registry: Registry) -> None:
        """Validating admission of a valid new object: raise the plugin's refusal (a 403)."""

    def deletion_finalizers(self, obj: dict[str, Any]) -> list[str]:
        """System finalizers the server adds when deletion starts (a CRD's instance cleanup)."""
        return []

    def after_write(self, obj: dict[str, Any], registry: Registry) -> None:
        """React to a committed create or update (a CRD installs its resource type)."""

    def after_delete(self, obj: dict[str, Any], registry: Registry) -> None:
        """React to an object leaving storage."""

    def is_spec_changed(self, new: dict[str, Any], old: dict[str, Any]) -> bool:
        keys = (set(new) | set(old)) - NON_SPEC_KEYS
        return any(new.get(key) != old.get(key) for key in keys)
