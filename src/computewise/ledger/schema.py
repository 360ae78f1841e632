"""The ledger's tables, in SQLAlchemy Core (bulk inserts of samples are the hot path; no ORM).

Times are epoch seconds as floats, so SQLite and PostgreSQL store and compare them the same way.
The Alembic migrations under ``migrations/versions`` create exactly these tables; a test checks
that the migrated database and this metadata agree.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "alerts",
    "attempts",
    "budgets",
    "gpu_samples",
    "metadata",
    "run_sample_totals",
    "run_tags",
    "runs",
    "samples",
    "steps",
    "storage_actions",
    "storage_applies",
]

metadata = sa.MetaData()

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("argv", sa.JSON, nullable=False),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("cwd", sa.Text, nullable=False),
    sa.Column("input_hash", sa.String(64)),
    sa.Column("started_at_s", sa.Float, nullable=False),
    sa.Column("ended_at_s", sa.Float),
    sa.Column("heartbeat_at_s", sa.Float, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("exit_code", sa.Integer),
    sa.Column("interval_s", sa.Float, nullable=False),
    sa.Column("logical_cpus", sa.Integer, nullable=False, server_default="1"),
    sa.Column("gpu_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("gpu_name", sa.String(255)),
    sa.Column("accelerator", sa.String(64)),
    sa.Column("hourly_usd", sa.Float, nullable=False),
    sa.Column("price", sa.JSON, nullable=False),
    sa.Column("inferences", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("error", sa.Text),
    sa.Column("summary", sa.JSON),
    sa.Index("ix_runs_status", "status"),
    sa.Index("ix_runs_started_at_s", "started_at_s"),
    sa.Index("ix_runs_input_hash", "input_hash"),
)

run_tags = sa.Table(
    "run_tags",
    metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("value", sa.String(1024), nullable=False),
    sa.Index("ix_run_tags_key_value", "key", "value"),
)

samples = sa.Table(
    "samples",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("t_s", sa.Float, nullable=False),
    sa.Column("interval_s", sa.Float, nullable=False),
    sa.Column("cpu_percent", sa.Float, nullable=False),
    sa.Column("rss_bytes", sa.BigInteger, nullable=False),
    sa.Column("read_bytes", sa.BigInteger, nullable=False),
    sa.Column("write_bytes", sa.BigInteger, nullable=False),
    sa.Column("net_sent_bytes", sa.BigInteger, nullable=False),
    sa.Column("net_recv_bytes", sa.BigInteger, nullable=False),
    sa.Column("host_cpu_percent", sa.Float, nullable=False),
    sa.Column("host_memory_used_bytes", sa.BigInteger, nullable=False),
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("gpu_util_pct", sa.Float),
    sa.Column("gpu_memory_used_bytes", sa.BigInteger),
    sa.Column("gpu_power_w", sa.Float),
    sa.Column("energy_j", sa.Float, nullable=False),
    sa.Column("energy_measured", sa.Boolean, nullable=False),
    sa.Column("idle", sa.Boolean, nullable=False),
    sa.Index("ix_samples_run_id_t_s", "run_id", "t_s"),
)

# A finished run's sample aggregate (revision 0005; the columns of ``aggregates.sample_totals_query``),
# kept when the run ends (``finish_run``, ``mark_crashed``) and deleted by any sample that lands after,
# so pricing a thousand finished runs reads a thousand rows instead of every one of their samples. A run
# without a row (still running, ended without samples, or sampled after it ended) is aggregated live.
run_sample_totals = sa.Table(
    "run_sample_totals",
    metadata,
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

gpu_samples = sa.Table(
    "gpu_samples",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("t_s", sa.Float, nullable=False),
    sa.Column("gpu_index", sa.Integer, nullable=False),
    sa.Column("utilization_pct", sa.Float),
    sa.Column("sm_clock_mhz", sa.Float),
    sa.Column("memory_used_bytes", sa.BigInteger),
    sa.Column("power_w", sa.Float),
    sa.Column("energy_counter_j", sa.Float),
    sa.Column("pcie_tx_bytes_per_s", sa.Float),
    sa.Column("pcie_rx_bytes_per_s", sa.Float),
    sa.Column("process_memory_bytes", sa.BigInteger),
    sa.Index("ix_gpu_samples_run_id_t_s", "run_id", "t_s"),
)

steps = sa.Table(
    "steps",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("t_s", sa.Float, nullable=False),
    sa.Column("data_wait_s", sa.Float, nullable=False),
    sa.Column("compute_s", sa.Float, nullable=False),
    sa.Column("samples", sa.BigInteger),
    sa.Column("tokens", sa.BigInteger),
    sa.Column("flops", sa.Float),
    sa.Index("ix_steps_run_id_step", "run_id", "step"),
)

# One row per submission of a logical run to an engine (revision 0003): a preempted job resubmitted under
# the same run name is one run with several attempts, and what the interruptions cost is read from them.
attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("backend", sa.String(32), nullable=False),
    sa.Column("job_id", sa.String(255), nullable=False),
    sa.Column("started_at_s", sa.Float, nullable=False),
    sa.Column("ended_at_s", sa.Float),
    sa.Column("exit_code", sa.Integer),
    sa.Column("outcome", sa.String(16), nullable=False),
)

budgets = sa.Table(
    "budgets",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scope", sa.String(1024), nullable=False, unique=True),
    sa.Column("monthly_usd", sa.Float, nullable=False),
    sa.Column("alert_at_pct", sa.JSON, nullable=False),
    sa.Column("webhook_url", sa.Text),
    sa.Column("command", sa.Text),
    sa.Column("created_at_s", sa.Float, nullable=False),
)

alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("scope", sa.String(1024)),
    sa.Column("budget_id", sa.Integer, sa.ForeignKey("budgets.id", ondelete="CASCADE")),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="SET NULL")),
    sa.Column("period", sa.String(16)),
    sa.Column("threshold_pct", sa.Float),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("fired_at_s", sa.Float, nullable=False),
    sa.Column("delivery", sa.JSON, nullable=False),
    # Budget alerts fire once per threshold per month: the database, not a race between writers, decides.
    sa.UniqueConstraint("kind", "budget_id", "period", "threshold_pct", name="uq_alerts_once"),
    sa.Index("ix_alerts_fired_at_s", "fired_at_s"),  # revision 0002
)

# What `computewise storage apply --apply` did (revision 0004): one row per apply, one per file it planned
# to delete or archive. The actions are written as "planned" before the first file is touched and each
# becomes done / vanished / failed after, so an apply cut short shows exactly what it reached.
storage_applies = sa.Table(
    "storage_applies",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("policy_sha256", sa.String(64), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("started_at_s", sa.Float, nullable=False),
    sa.Column("finished_at_s", sa.Float),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Index("ix_storage_applies_started_at_s", "started_at_s"),
)

storage_actions = sa.Table(
    "storage_actions",
    metadata,
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
