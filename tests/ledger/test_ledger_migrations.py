"""The Alembic migrations: they build exactly ``schema.metadata``, upgrade old ledgers, refuse new ones.

Revision 0002 (an index on ``alerts.fired_at_s``) is a real second step, so upgrading a ledger made
at 0001, with its rows and its backup, is exercised for real on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from computewise.errors import LedgerError
from computewise.ledger import Ledger, schema
from computewise.ledger.connect import open_engine, write
from computewise.ledger.migrate import HEAD_REVISION, alembic_config


def _at_revision(url: str, revision: str) -> sa.Engine:
    """A ledger built by the migrations up to ``revision`` (or stamped there), left open for more SQL."""
    engine, _ = open_engine(url)
    write(engine, lambda conn: command.upgrade(alembic_config(conn), revision))
    return engine


def _index_names(engine: sa.Engine, table: str) -> set[str]:
    with engine.connect() as conn:
        return {index["name"] or "" for index in sa.inspect(conn).get_indexes(table)}


def test_head_revision_is_the_scripts_single_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == [HEAD_REVISION]
    chain = [s.revision for s in script.walk_revisions("base", "heads")]
    assert chain == sorted(chain, reverse=True)  # linear: 0002 -> 0001


def test_the_migrated_schema_is_exactly_the_metadata(ledger: Ledger) -> None:
    with ledger.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(context, schema.metadata) == []


def test_downgrade_to_nothing_and_back(ledger_url: str) -> None:
    engine = _at_revision(ledger_url, "head")
    write(engine, lambda conn: command.downgrade(alembic_config(conn), "base"))
    with engine.connect() as conn:
        assert set(sa.inspect(conn).get_table_names()) == {"alembic_version"}
    engine.dispose()
    with Ledger.open(ledger_url) as ledger:  # an empty alembic_version is a new ledger
        assert ledger.schema_change is not None and ledger.schema_change.from_revision is None
        assert ledger.runs() == []


def test_a_ledger_at_0001_is_upgraded_with_its_runs(ledger_url: str) -> None:
    engine = _at_revision(ledger_url, "0001")
    assert "ix_alerts_fired_at_s" not in _index_names(engine, "alerts")
    # A run recorded by the computewise of revision 0001 (its price has carried the grid and PUE from the start).
    with engine.begin() as conn:
        conn.execute(
            schema.runs.insert().values(
                kind="command", command="python train.py", argv=["python", "train.py"], tags={"team": "nlp"},
                host="h", pid=1, user="ann", cwd="/", started_at_s=1.7e9, heartbeat_at_s=1.7e9, status="succeeded",
                interval_s=1.0, hourly_usd=2.0, price={"hourly_usd": 2.0, "source": "s", "explanation": "e",
                "assumed": False, "carbon_g_per_kwh": 475.0, "carbon_source": "", "pue": 1.0},
            )
        )  # fmt: skip
    engine.dispose()

    with Ledger.open(ledger_url) as ledger:
        change = ledger.schema_change
        assert change is not None and (change.from_revision, change.to_revision) == ("0001", HEAD_REVISION)
        assert [run.command for run in ledger.runs()] == ["python train.py"]
        assert "ix_alerts_fired_at_s" in _index_names(ledger.engine, "alerts")

    path = sa.make_url(ledger_url).database if ledger_url.startswith("sqlite") else None
    if path is None:
        assert change.backup is None
        return
    assert change.backup == Path(f"{path}.bak-0001")
    with sqlite3.connect(change.backup) as backup:  # the copy is the ledger as it was, WAL included
        assert backup.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
        assert backup.execute("SELECT command FROM runs").fetchall() == [("python train.py",)]
    backup.close()


def test_an_existing_backup_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    _at_revision(str(path), "0001").dispose()
    earlier = tmp_path / "ledger.sqlite.bak-0001"
    earlier.write_bytes(b"an earlier backup")
    with Ledger.open(str(path)) as ledger:
        assert ledger.schema_change is not None
        assert ledger.schema_change.backup == tmp_path / "ledger.sqlite.bak-0001.1"
    assert earlier.read_bytes() == b"an earlier backup"


def test_a_ledger_from_a_newer_computewise_is_refused_untouched(ledger_url: str) -> None:
    engine = _at_revision(ledger_url, "head")
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099'")
    engine.dispose()
    path = Path(sa.make_url(ledger_url).database or "") if ledger_url.startswith("sqlite") else None
    before = path.read_bytes() if path else b""

    with pytest.raises(LedgerError, match="schema revision 0099, which this computewise does not know") as caught:
        Ledger.open(ledger_url)
    assert caught.value.hint is not None and "upgrade computewise" in caught.value.hint
    if path:
        assert path.read_bytes() == before
        assert not list(path.parent.glob("*.bak-*"))


def test_tables_beside_an_empty_version_table_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        conn.execute("CREATE TABLE experiments (id INTEGER PRIMARY KEY)")
    conn.close()
    with pytest.raises(LedgerError, match=r"holds tables \(experiments\)"):
        Ledger.open(str(path))
