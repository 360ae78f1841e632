"""Index alerts by the time they fired: ``Ledger.alerts(since_s=...)`` filters and orders by it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-05-20
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_alerts_fired_at_s", "alerts", ["fired_at_s"])


def downgrade() -> None:
    op.drop_index("ix_alerts_fired_at_s", table_name="alerts")
