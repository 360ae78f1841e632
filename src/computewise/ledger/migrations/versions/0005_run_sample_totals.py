"""A finished run's sample aggregate, kept when it ends, so pricing finished runs reads one row per run.

Runs that ended before this revision get theirs here, computed from their samples by the same
aggregate ``Ledger.run_totals`` runs (one pass over the samples, once); runs still running get theirs
when they end.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The columns of ``computewise.ledger.aggregates.sample_totals_query``, written out: a migration must
# keep doing what it did when it was written, whatever that module becomes.
_BACKFILL = """
INSERT INTO run_sample_totals (
    run_id, sample_count, sampled_s, idle_s, cpu_percent_mean, gpu_util_pct_mean, energy_j, energy_measured,
    peak_rss_bytes, peak_gpu_memory_bytes, last_sample_t_s
)
SELECT
    s.run_id,
    COUNT(*),
    SUM(s.interval_s),
    SUM(CASE WHEN s.idle THEN s.interval_s ELSE 0.0 END),
    SUM(s.cpu_percent * s.interval_s) / NULLIF(SUM(s.interval_s), 0),
    SUM(s.gpu_util_pct * s.interval_s) / NULLIF(SUM(CASE WHEN s.gpu_util_pct IS NOT NULL THEN s.interval_s END), 0),
    SUM(s.energy_j),
    MIN(CASE WHEN s.energy_measured THEN 1 ELSE 0 END) = 1,
    MAX(s.rss_bytes),
    MAX(s.gpu_memory_used_bytes),
    MAX(s.t_s)
FROM samples AS s JOIN runs AS r ON r.id = s.run_id
WHERE r.status <> 'running'
GROUP BY s.run_id
"""


def upgrade() -> None:
    op.create_table(
        "run_sample_totals",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("sample_count", sa.Integer, nullable=False),
        sa.Column("sampled_s", sa.Float, nullable=False),
        sa.Column("idle_s", sa.Float, nullable=False),
        sa.Column("cpu_percent_mean", sa.Float),
        sa.Column("gpu_util_pct_mean", sa.Float),
        sa.Column("energy_j", sa.Float, nullable=False),
        sa.Column("energy_measured", sa.Boolean, nullable=False),
        sa.Column("peak_rss_bytes", sa.BigInteger),
        sa.Column("peak_gpu_memory_bytes", sa.BigInteger),
        sa.Column("last_sample_t_s", sa.Float),
    )
    op.execute(sa.text(_BACKFILL))


def downgrade() -> None:
    op.drop_table("run_sample_totals")
