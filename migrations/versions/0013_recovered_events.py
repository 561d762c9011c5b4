"""Event kind `recovered`: what a new leader did to make the store agree with the cluster
after the database lost commits or was restored (adopted, torn down, released).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = (
    "enqueued",
    "admitted",
    "started",
    "released",
    "preempted",
    "requeued",
    "failed",
    "succeeded",
    "suspended",
    "resumed",
    "quota_changed",
)


def _check(kinds: Sequence[str]) -> None:
    op.drop_constraint(op.f("ck_events_kind_known"), "events", type_="check")
    listed = ", ".join(f"'{kind}'" for kind in kinds)
    op.create_check_constraint(op.f("ck_events_kind_known"), "events", f"kind IN ({listed})")


def upgrade() -> None:
    _check((*_BEFORE, "recovered"))


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE kind = 'recovered'")
    _check(_BEFORE)
