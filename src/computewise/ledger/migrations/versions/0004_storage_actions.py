"""What ``computewise storage apply`` deleted or archived: one row per apply, one per file acted on.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "storage_applies",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("policy_sha256", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("started_at_s", sa.Float, nullable=False),
        sa.Column("finished_at_s", sa.Float),
        sa.Column("status", sa.String(16), nullable=False),
    )
    op.create_index("ix_storage_applies_started_at_s", "storage_applies", ["started_at_s"])
    op.create_table(
        "storage_actions",
        sa.Column("apply_id", sa.Integer, sa.ForeignKey("storage_applies.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("number", sa.Integer, primary_key=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("from_class", sa.String(64), nullable=False),
        sa.Column("to_class", sa.String(64)),
        sa.Column("usd_per_month_saved", sa.Float, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("done_at_s", sa.Float),
        sa.Column("error", sa.Text),
    )


def downgrade() -> None:
    op.drop_table("storage_actions")
    op.drop_index("ix_storage_applies_started_at_s", "storage_applies")
    op.drop_table("storage_applies")
