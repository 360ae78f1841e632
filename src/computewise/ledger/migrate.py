"""Create, check and migrate the ledger's schema with Alembic, without paying for Alembic on every open.

Opening an up-to-date ledger costs two plain queries (its table names and ``alembic_version``), so
``computewise runs`` starts fast; Alembic is imported only to create or migrate. What opening does:

    no tables (a new file, an empty database)     create it: upgrade to head
    alembic_version is HEAD_REVISION              nothing
    an older revision this version knows          copy a SQLite file to <file>.bak-<rev>, then upgrade
    a revision this version does not know         LedgerError: written by a newer computewise
    tables but no alembic_version, or not SQLite  LedgerError: not a ledger; left exactly as it was

Creating and migrating happen in one transaction under a lock (``BEGIN IMMEDIATE`` on SQLite, an
advisory lock on PostgreSQL) after reading the state again, so sixteen jobs opening a new ledger at
once create it once, and a failed migration leaves the old schema whole.

Policy: every change to ``schema.py`` comes with a new revision in ``migrations/versions`` (never an
edit of a released one) and a new ``HEAD_REVISION``; ``tests/ledger`` checks that the migrated schema
equals ``schema.metadata`` on SQLite and PostgreSQL. To draft one from the metadata::

    from alembic import command
    from computewise.ledger.migrate import alembic_config
    command.revision(alembic_config(url="sqlite:////tmp/at-head.sqlite"), "what changed",
                     autogenerate=True, rev_id="0003")
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import sqlalchemy as sa

from computewise.errors import LedgerError
from computewise.ledger.connect import LOCATION_HINT, display_url, ledger_error, sqlite_file, write

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["HEAD_REVISION", "MIGRATIONS_DIR", "VERSION_TABLE", "SchemaChange", "alembic_config", "ensure_schema"]

HEAD_REVISION = "0005"
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version"
_PG_LOCK_KEY = 0x636F6D7075746577  # "computew": one advisory lock for every migrating process
_WAL_RETRIES = 50


@dataclass(frozen=True)
class SchemaChange:
    """What opening did to the schema: created (``from_revision`` None) or migrated, and the backup made."""

    from_revision: str | None
    to_revision: str
    backup: Path | None


@dataclass(frozen=True)
class _State:
    tables: frozenset[str]
    revision: str | None  # None: no alembic_version table, or an empty one


_Action = Literal["current", "create", "upgrade"]


def ensure_schema(engine: sa.Engine, url: sa.URL) -> SchemaChange | None:
    """Bring the ledger at ``url`` to ``HEAD_REVISION``, or refuse it untouched with a ``LedgerError``."""
    try:
        with engine.connect() as conn:
            state = _read_state(conn)
        if state.revision == HEAD_REVISION:
            _use_wal(engine, url)
            return None
        return _create_or_upgrade(engine, url, state)
    except sa.exc.DBAPIError as exc:
        raise ledger_error("cannot read or migrate the ledger", url, exc) from exc


def alembic_config(connection: sa.Connection | None = None, url: str | None = None) -> Config:
    """An Alembic configuration on the packaged migrations, for ``connection`` or else ``url``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolates %
    config.attributes["connection"] = connection
    return config


def _create_or_upgrade(engine: sa.Engine, url: sa.URL, state: _State) -> SchemaChange | None:
    from alembic import command
    from alembic.script import ScriptDirectory

    known = frozenset(script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions())
    _plan(state, known, url)  # refuses a foreign or newer database before anything touches it
    _use_wal(engine, url)
    path = sqlite_file(url)

    def work(conn: sa.Connection) -> SchemaChange | None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
        locked = _read_state(conn)  # another process may have done it while we waited for the lock
        action = _plan(locked, known, url)
        if action == "current":
            return None
        backup = _backup(path, locked.revision) if action == "upgrade" and path is not None else None
        command.upgrade(alembic_config(conn), "head")
        if conn.dialect.name == "sqlite" and conn.exec_driver_sql("PRAGMA foreign_key_check").first() is not None:
            raise LedgerError(
                f"migrating the ledger at {display_url(url)} would break its foreign keys; nothing was changed",
                "report this as a computewise bug, with the revision named in alembic_version",
            )
        return SchemaChange(locked.revision if action == "upgrade" else None, HEAD_REVISION, backup)

    # Foreign keys off while migrating: SQLite rebuilds altered tables, and dropping the old copy of
    # a parent table would otherwise cascade-delete its children (foreign_key_check verifies instead).
    return write(engine, work, foreign_keys=False)


def _read_state(conn: sa.Connection) -> _State:
    tables = frozenset(sa.inspect(conn).get_table_names())
    if VERSION_TABLE not in tables:
        return _State(tables, revision=None)
    revisions = [row[0] for row in conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}")]
    return _State(tables, revision=",".join(sorted(revisions)) or None)


def _plan(state: _State, known: frozenset[str], url: sa.URL) -> _Action:
    where = display_url(url)
    if state.revision == HEAD_REVISION:
        return "current"
    if state.revision is None:
        others = sorted(state.tables - {VERSION_TABLE})
        if not others:
            return "create"
        raise LedgerError(
            f"{where} holds tables ({', '.join(others[:5])}) but no computewise schema version, "
            "so it is not a computewise ledger",
            f"computewise left it untouched; {LOCATION_HINT}",
        )
    if state.revision not in known:
        raise LedgerError(
            f"the ledger at {where} has schema revision {state.revision}, which this computewise does not "
            f"know (it knows up to {HEAD_REVISION}): a newer computewise wrote it",
            f"upgrade computewise (pip install -U computewise), or {LOCATION_HINT}",
        )
    return "upgrade"


def _use_wal(engine: sa.Engine, url: sa.URL) -> None:
    """Switch a SQLite ledger to WAL once; the mode is stored in the file, so every process then uses it."""
    if engine.dialect.name != "sqlite":
        return
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for attempt in range(_WAL_RETRIES):
            try:
                if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                    return
                cursor.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError as exc:
                # The switch needs the file to itself for a moment; other processes may be reading it.
                if "locked" not in str(exc) or attempt == _WAL_RETRIES - 1:
                    raise LedgerError(
                        f"cannot switch the ledger at {display_url(url)} to WAL mode: {exc}",
                        f"close the programs using it and try again, or {LOCATION_HINT}",
                    ) from exc
                time.sleep(0.02 * (attempt + 1))
    finally:
        raw.close()


def _backup(path: Path, revision: str | None) -> Path:
    """A consistent copy (SQLite's online backup, which includes the WAL) next to the file; never overwrites."""
    target = path.with_name(f"{path.name}.bak-{revision}")
    copy = 1
    while target.exists():
        target = path.with_name(f"{path.name}.bak-{revision}.{copy}")
        copy += 1
    source = sqlite3.connect(path)
    try:
        destination = sqlite3.connect(target)
        try:
            source.backup(destination)
        finally:
            destination.close()
    finally:
        source.close()
    return target
