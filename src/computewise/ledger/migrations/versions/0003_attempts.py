"""Attempts of a logical run: each submission of a resubmitted (preempted) job, under one run.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempts",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("number", sa.Integer, primary_key=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("job_id", sa.String(255), nullable=False),
        sa.Column("started_at_s", sa.Float, nullable=False),
        sa.Column("ended_at_s", sa.Float),
        sa.Column("exit_code", sa.Integer),
        sa.Column("outcome", sa.String(16), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("attempts")
