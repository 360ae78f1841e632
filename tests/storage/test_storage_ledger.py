"""The ledger's storage tables (revision 0004): an older ledger upgrades, and applies read back as written.

Run on SQLite and PostgreSQL through the shared ``ledger_url`` fixture.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from computewise.ledger import Ledger, StorageAction
from computewise.ledger.connect import open_engine, write
from computewise.ledger.migrate import alembic_config


def test_a_ledger_at_0003_gains_the_storage_tables(ledger_url: str) -> None:
    engine, _ = open_engine(ledger_url)
    write(engine, lambda conn: command.upgrade(alembic_config(conn), "0003"))
    with engine.connect() as conn:
        assert "storage_actions" not in sa.inspect(conn).get_table_names()
    engine.dispose()
    with Ledger.open(ledger_url) as ledger:
        assert ledger.schema_change is not None and ledger.schema_change.from_revision == "0003"
        assert ledger.storage_applies() == []


def test_an_apply_reads_back_and_only_done_actions_count_as_saved(ledger_url: str) -> None:
    actions = [
        StorageAction("/d/a.log", "delete", "log", 1000, "aws:ebs-gp3", None, 0.5),
        StorageAction("/d/b.pt", "archive", "checkpoint", 4000, "aws:ebs-gp3", "aws:s3-glacier-ir", 2.0),
        StorageAction("/d/c.log", "delete", "log", 300, "aws:ebs-gp3", None, 0.25),
        StorageAction("/d/d.log", "delete", "log", 700, "aws:ebs-gp3", None, 0.125),
    ]
    with Ledger.open(ledger_url) as ledger:
        apply_id = ledger.start_storage_apply("/d", "f" * 64, 100.0, "host", 42, "ann", actions)
        ledger.finish_storage_actions(apply_id, [(0, "done", 101.0, None), (1, "done", 102.0, None)])
        ledger.finish_storage_actions(apply_id, [(2, "vanished", 103.0, "gone")])
        ledger.finish_storage_apply(apply_id, "interrupted", 104.0)

        (applied,) = ledger.storage_applies()
        assert (applied.id, applied.status, applied.finished_at_s, applied.user) == (
            apply_id,
            "interrupted",
            104.0,
            "ann",
        )
        rows = ledger.storage_actions(apply_id)
        assert [(r.number, r.outcome) for r in rows] == [(0, "done"), (1, "done"), (2, "vanished"), (3, "planned")]
        assert rows[1].to_class == "aws:s3-glacier-ir" and rows[2].error == "gone"
        assert ledger.storage_done_totals(None, 200.0) == {"delete": (1, 1000, 0.5), "archive": (1, 4000, 2.0)}
        assert ledger.storage_done_totals(101.5, 200.0) == {"archive": (1, 4000, 2.0)}
        assert ledger.storage_applies(since_s=200.0) == []
