"""Find the ledger, open an engine on it, and fail fast with a fix when that cannot work.

Opening is eager: ``computewise run`` must refuse to launch a job whose cost it could not record,
so a wrong password, an unreachable server (``connect_timeout`` 5 s), an unwritable directory or a
file that is not a SQLite database surface here as a ``LedgerError`` with a hint, before any child
process starts.

SQLite is tuned for many writers sharing one file (one ``computewise run`` per job): a 30 s busy
timeout, ``synchronous=NORMAL`` (commits survive a crash of the process; they are cheap in WAL
mode), foreign keys on, and write transactions that begin with ``BEGIN IMMEDIATE`` so that they
queue on the busy timeout instead of failing later when a read lock cannot be upgraded. The WAL
journal itself is switched on by ``computewise.ledger.migrate`` once it knows the file is a ledger,
because changing a journal mode rewrites the file header of a database that may not be ours.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from platformdirs import user_data_dir

from computewise.errors import LedgerError, MissingExtraError

__all__ = [
    "ENV_VAR",
    "LOCATION_HINT",
    "Unreadable",
    "default_url",
    "display_url",
    "ledger_error",
    "lenient_json",
    "open_engine",
    "resolve_url",
    "sqlite_file",
    "write",
]

T = TypeVar("T")

ENV_VAR = "COMPUTEWISE_DB"
LOCATION_HINT = f"point --db / ${ENV_VAR} at another ledger (a SQLite file path or a postgresql:// URL)"
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 30_000
CONNECT_TIMEOUT_S = 5
_WRITE_OPTION = "computewise_write"
_LOCKED_RETRIES = 8
_FORMS_HINT = (
    f"use a file path, sqlite:////absolute/path.sqlite or postgresql://user:password@host:5432/dbname "
    f"(--db or ${ENV_VAR})"
)


@dataclass(frozen=True)
class Unreadable:
    """The text of a JSON column that does not parse as JSON, kept for ``ledger.rows`` to name its row."""

    text: str


def lenient_json(text: str) -> Any:
    """``json.loads`` for the SQLite engine's JSON columns: text that is not JSON (SQLite stores any text)
    comes back as ``Unreadable`` instead of raising inside the fetch, where nobody knows which row it was."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; RecursionError: nesting too deep
        return Unreadable(str(text))


def default_url() -> str:
    """``$COMPUTEWISE_DB`` or ``ledger.sqlite`` in the user's data directory (created on first use)."""
    return os.environ.get(ENV_VAR) or str(Path(user_data_dir("computewise")) / "ledger.sqlite")


def resolve_url(url: str | None) -> sa.URL:
    """The SQLAlchemy URL of ``url``, ``$COMPUTEWISE_DB`` or the default file.

    Accepts ``sqlite:///PATH``, a plain file path (a SQLite file, ``~`` expanded) and
    ``postgresql://`` (or ``postgres://``), which is given the psycopg 3 driver.
    """
    text = (url or default_url()).strip()
    if "://" not in text:
        return sa.URL.create("sqlite", database=str(Path(text).expanduser().absolute()))
    try:
        parsed = sa.make_url(text)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise LedgerError(f"cannot parse the ledger URL: {exc}", _FORMS_HINT) from exc
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:" or parsed.database.startswith("file:"):
            raise LedgerError(
                f"the ledger must be a SQLite file, not {text!r} (an in-memory database loses every run)",
                _FORMS_HINT,
            )
        return parsed.set(drivername="sqlite", database=str(Path(parsed.database).expanduser().absolute()))
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername=f"postgresql+{driver or 'psycopg'}")
    raise LedgerError(
        f"unsupported ledger URL scheme {parsed.drivername!r} in {display_url(parsed)}",
        f"computewise keeps its ledger in SQLite or PostgreSQL: {_FORMS_HINT}",
    )


def display_url(url: sa.URL) -> str:
    """The URL as it may be printed: the password replaced by ``***``."""
    return url.render_as_string(hide_password=True)


def sqlite_file(url: sa.URL) -> Path | None:
    return Path(url.database) if url.get_backend_name() == "sqlite" and url.database else None


def open_engine(url: str | None, create: bool = True) -> tuple[sa.Engine, sa.URL]:
    """An engine on the resolved URL, already connected once, so that every failure shows here.

    ``create=False`` (verbs that only read: ``runs``, ``cost``, ``budget status``) refuses a SQLite file
    named by ``--db`` or ``$COMPUTEWISE_DB`` that does not exist instead of creating it, so a typo leaves
    nothing behind. Writers may create the file, but directories only for the default location (which
    readers may create too: it is computewise's own, and a fresh install reads as "no runs yet"); a
    missing directory in a path the user typed is a typo far more often than a wish.
    """
    resolved = resolve_url(url)
    path = sqlite_file(resolved)
    if path is not None:
        _check_sqlite_file(path, create=create, make_directory=not url and not os.environ.get(ENV_VAR))
        # Text that is not JSON comes back marked, for ``rows`` to name its row (SQLite stores any text).
        engine = sa.create_engine(resolved, json_deserializer=lenient_json)
        sa.event.listen(engine, "connect", _tune_sqlite)
        sa.event.listen(engine, "begin", _begin_sqlite)
    else:
        engine = _postgresql_engine(resolved)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        raise ledger_error("cannot open the ledger", resolved, exc) from exc
    return engine, resolved


def write(engine: sa.Engine, work: Callable[[sa.Connection], T], foreign_keys: bool = True) -> T:
    """Run ``work`` in one short write transaction, retrying while SQLite says the file is locked.

    The busy timeout already makes writers queue; the retry covers the cases where SQLite answers
    "locked" without waiting (a WAL switch or recovery racing with other processes).
    ``foreign_keys=False`` suspends SQLite's enforcement for this transaction (migrations only).
    """
    attempt = 0
    while True:
        try:
            with engine.connect() as conn:
                conn.execution_options(**{_WRITE_OPTION: True})
                toggle = not foreign_keys and conn.dialect.name == "sqlite"
                if toggle:  # a no-op inside a transaction, so on the driver's connection, before BEGIN
                    conn.connection.cursor().execute("PRAGMA foreign_keys = OFF")
                try:
                    with conn.begin():
                        return work(conn)
                finally:
                    if toggle:
                        conn.connection.cursor().execute("PRAGMA foreign_keys = ON")
        except sa.exc.OperationalError as exc:
            attempt += 1
            if not _is_locked(exc) or attempt >= _LOCKED_RETRIES:
                raise
            time.sleep(random.uniform(0.05, 0.1) * 2**attempt)


def _is_locked(exc: sa.exc.OperationalError) -> bool:
    return "database is locked" in str(exc.orig) or "database table is locked" in str(exc.orig)


def ledger_error(doing: str, url: sa.URL, exc: sa.exc.DBAPIError) -> LedgerError:
    """A ``LedgerError`` that says what failed, where, and how to fix it (never the password)."""
    reason = " ".join(str(exc.orig).split()) or type(exc.orig).__name__
    where = display_url(url)
    if url.password:
        reason = reason.replace(str(url.password), "***")
    if "password authentication failed" in reason or "no password supplied" in reason:
        hint = f"check the user and password in the URL, or {LOCATION_HINT}"
    elif "permission denied" in reason:
        hint = f"ask the database owner to grant this user CREATE and write rights on the schema, or {LOCATION_HINT}"
    elif "does not exist" in reason and "database" in reason:
        hint = f"create the database (createdb {url.database}), or {LOCATION_HINT}"
    elif url.get_backend_name() == "sqlite" and "unable to open" in reason:
        hint = f"make sure the directory exists and is writable, or {LOCATION_HINT}"
    elif url.get_backend_name() == "sqlite":
        hint = f"if the file is damaged, move it away so a new ledger is created, or {LOCATION_HINT}"
    else:
        hint = f"check that the server is running and reachable at that host and port, or {LOCATION_HINT}"
    return LedgerError(f"{doing} at {where}: {reason}", hint)


def _check_sqlite_file(path: Path, create: bool, make_directory: bool) -> None:
    """Refuse, without touching it, anything at ``path`` that is not a SQLite database (or is missing when reading)."""
    hint = f"computewise left it untouched; move it away, or {LOCATION_HINT}"
    if not create and not make_directory and not path.exists():
        raise LedgerError(
            f"no ledger at {path}",
            f"check the path, or record a run there first: computewise run --db {path} -- python train.py",
        )
    if create and not path.parent.is_dir() and not make_directory:
        if path.parent.exists():
            raise LedgerError(f"cannot create the ledger {path}: {path.parent} is a file, not a directory", hint)
        raise LedgerError(
            f"cannot create the ledger {path}: the directory {path.parent} does not exist",
            f"check the path, or create the directory first: mkdir -p {path.parent}",
        )
    try:
        if make_directory:
            path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise LedgerError(f"the ledger path {path} is a directory", hint)
        header = b""
        if path.exists():
            with path.open("rb") as handle:
                header = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise LedgerError(
            f"cannot use {path} as the ledger: {exc.strerror or exc}",
            f"make sure the directory exists and is writable, or {LOCATION_HINT}",
        ) from exc
    if header and header != SQLITE_MAGIC:
        raise LedgerError(f"{path} is not a SQLite database, so it cannot be the computewise ledger", hint)
    for target in (path, path.parent):
        if target.exists() and not os.access(target, os.W_OK):
            raise LedgerError(
                f"the ledger {path} is not writable ({target} is read-only)",
                f"fix the permissions, or {LOCATION_HINT}",
            )


def _tune_sqlite(dbapi_connection: Any, _record: Any) -> None:
    # isolation_level None: sqlite3 stops issuing its own BEGIN; _begin_sqlite issues ours.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _begin_sqlite(conn: sa.Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE_OPTION) else "BEGIN")


def _postgresql_engine(url: sa.URL) -> sa.Engine:
    if url.drivername == "postgresql+psycopg":
        try:
            import psycopg  # noqa: F401 (only to say which extra is missing)
        except ImportError as exc:
            raise MissingExtraError("psycopg", "postgres", "a PostgreSQL ledger") from exc
    connect_args: dict[str, Any] = {"application_name": "computewise"}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    try:
        return sa.create_engine(url, connect_args=connect_args, pool_pre_ping=True)
    except (sa.exc.NoSuchModuleError, ImportError) as exc:
        raise LedgerError(
            f"no PostgreSQL driver {url.drivername!r} for {display_url(url)}: {exc}",
            f"use postgresql:// (psycopg 3: pip install 'computewise[postgres]'), or {LOCATION_HINT}",
        ) from exc
