"""Opening a ledger: where it lives, and every way that can fail, each with a message and a fix.

Failures are real: a port nobody listens on, a server that accepts and never answers, a real
PostgreSQL refusing a password, files that are not SQLite databases (which must stay byte-identical).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from computewise.errors import LedgerError, MissingExtraError
from computewise.ledger import Ledger, connect
from computewise.ledger.connect import ENV_VAR, resolve_url
from computewise.system.ports import free_port


@pytest.fixture(autouse=True)
def _no_env_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


# -- where the ledger lives -------------------------------------------------------------------


def test_the_default_ledger_is_created_in_the_user_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    expected = tmp_path / "data" / "computewise" / "ledger.sqlite"
    with Ledger.open() as ledger:
        assert ledger.url == f"sqlite:///{expected}"
        assert ledger.schema_change is not None and ledger.schema_change.from_revision is None
    assert expected.read_bytes().startswith(b"SQLite format 3\x00")
    with Ledger.open() as again:
        assert again.schema_change is None


def test_the_environment_variable_names_the_ledger_and_an_argument_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "team.sqlite"))
    with Ledger.open() as ledger:
        assert ledger.url == f"sqlite:///{tmp_path / 'team.sqlite'}"
    with Ledger.open(f"sqlite:///{tmp_path / 'mine.sqlite'}") as ledger:
        assert ledger.url.endswith("/mine.sqlite")


def test_plain_paths_are_sqlite_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_url("runs.sqlite").database == str(tmp_path / "runs.sqlite")
    assert resolve_url("~/ledgers/a.db").database == str(tmp_path / "home" / "ledgers" / "a.db")
    assert resolve_url("sqlite:///rel.db").database == str(tmp_path / "rel.db")
    (tmp_path / "home" / "ledgers").mkdir(parents=True)
    with Ledger.open("~/ledgers/a.db"):
        assert (tmp_path / "home" / "ledgers" / "a.db").is_file()


def test_a_missing_file_or_directory_is_created_only_where_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers never create a ledger; writers create the file, but a directory only at the default location."""
    with pytest.raises(LedgerError, match="no ledger at"):
        Ledger.open(str(tmp_path / "x.db"), create=False)
    with pytest.raises(LedgerError, match=r"the directory .* does not exist"):
        Ledger.open(f"sqlite:///{tmp_path / 'typo' / 'x.db'}")
    monkeypatch.setenv("COMPUTEWISE_DB", str(tmp_path / "env" / "x.db"))
    with pytest.raises(LedgerError, match=r"the directory .* does not exist"):
        Ledger.open(None)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.delenv("COMPUTEWISE_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the default location: made on first use
    with Ledger.open(None, create=False) as ledger:  # even by a reader: a fresh install has "no runs yet"
        assert ledger.url.endswith("/computewise/ledger.sqlite")
    assert (tmp_path / "data" / "computewise" / "ledger.sqlite").is_file()


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://ann:pw@db.internal:5432/ledger", "postgresql+psycopg"),
        ("postgres://ann@db.internal/ledger", "postgresql+psycopg"),
        ("postgresql+psycopg://ann@db.internal/ledger", "postgresql+psycopg"),
    ],
)
def test_postgresql_urls_get_the_psycopg_driver(url: str, driver: str) -> None:
    assert resolve_url(url).drivername == driver


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://ann@db/ledger", "unsupported ledger URL scheme 'mysql'"),
        ("gopher://x/y", "unsupported ledger URL scheme 'gopher'"),
        ("sqlite://", "must be a SQLite file"),
        ("sqlite:///:memory:", "must be a SQLite file"),
        ("postgresql://ann:pw@db:port/ledger", "cannot parse the ledger URL"),
    ],
)
def test_unsupported_urls_are_refused_with_the_accepted_forms(url: str, says: str) -> None:
    with pytest.raises(LedgerError, match=says) as caught:
        Ledger.open(url)
    assert caught.value.hint is not None and "postgresql://" in caught.value.hint


# -- servers that cannot be used --------------------------------------------------------------


def test_a_port_nobody_listens_on_fails_at_once() -> None:
    start_s = time.monotonic()
    with pytest.raises(LedgerError, match="cannot open the ledger at postgresql") as caught:
        Ledger.open(f"postgresql://ann:hunter2@127.0.0.1:{free_port()}/ledger")
    assert time.monotonic() - start_s < 3
    assert "hunter2" not in str(caught.value)
    assert caught.value.hint is not None and "server is running" in caught.value.hint


def test_a_server_that_never_answers_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect, "CONNECT_TIMEOUT_S", 2)  # 5 s in real use; libpq's least is 2 s
    with socket.socket() as silent:  # the kernel completes the handshake; nobody ever speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        start_s = time.monotonic()
        with pytest.raises(LedgerError, match="cannot open the ledger"):
            Ledger.open(f"postgresql://ann@127.0.0.1:{silent.getsockname()[1]}/ledger")
        assert 1.5 < time.monotonic() - start_s < 4


def test_a_wrong_password_is_named_but_never_printed(postgres_server: Any) -> None:
    server = postgres_server
    name = server.create_database()
    try:
        with pytest.raises(LedgerError, match="password authentication failed") as caught:
            Ledger.open(server.url(name, password="Wr0ng-Passw0rd"))
        assert "Wr0ng-Passw0rd" not in str(caught.value)
        assert caught.value.hint is not None and "user and password" in caught.value.hint
    finally:
        server.drop_database(name)


def test_a_missing_database_says_how_to_create_it(postgres_server: Any) -> None:
    with pytest.raises(LedgerError, match="does not exist") as caught:
        Ledger.open(postgres_server.url("no_such_ledger"))
    assert caught.value.hint is not None and "createdb no_such_ledger" in caught.value.hint


def test_a_user_who_may_not_create_tables_is_told_whom_to_ask(postgres_server: Any) -> None:
    server = postgres_server
    name = server.create_database()
    role = f"r_{name[2:14]}"
    server.admin(f"CREATE ROLE {role} LOGIN PASSWORD 'reader-pw'")
    server.admin("REVOKE CREATE ON SCHEMA public FROM PUBLIC", database=name)  # the default from PostgreSQL 15 on
    try:
        url = f"postgresql://{role}:reader-pw@127.0.0.1:{server.port}/{name}"
        with pytest.raises(LedgerError, match="permission denied") as caught:
            Ledger.open(url)
        assert caught.value.hint is not None and "grant" in caught.value.hint
    finally:
        server.drop_database(name)
        server.admin(f"DROP ROLE {role}")


def test_without_psycopg_it_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what `import psycopg` sees when it is not installed
    with pytest.raises(MissingExtraError) as caught:
        Ledger.open("postgresql://ann@127.0.0.1/ledger")
    assert caught.value.hint == "pip install 'computewise[postgres]'"


# -- files that cannot be used ----------------------------------------------------------------


def test_a_directory_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the ledger's directory should be\n")
    with pytest.raises(LedgerError, match="not-a-dir is a file, not a directory") as caught:
        Ledger.open(str(blocker / "ledger.sqlite"))
    assert caught.value.hint is not None and "left it untouched" in caught.value.hint


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(LedgerError, match="not writable"):
            Ledger.open(str(locked / "ledger.sqlite"))
    finally:
        locked.chmod(0o700)


def test_a_directory_is_not_a_ledger(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="is a directory"):
        Ledger.open(str(tmp_path))


@pytest.mark.parametrize(
    "content",
    [
        os.urandom(8192),
        b"run,cost_usd\n1,2.50\n2,3.75\n",
        b"SQLite format 3\x00" + os.urandom(8192 - 16),  # the right magic over garbage
    ],
    ids=["random-bytes", "csv-text", "corrupt-sqlite"],
)
def test_a_file_that_is_not_a_ledger_is_refused_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(content)
    with pytest.raises(LedgerError) as caught:
        Ledger.open(str(path))
    assert str(path) in caught.value.message
    assert caught.value.hint is not None
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.sqlite"]


def test_another_applications_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('buy more GPUs')")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=r"holds tables \(notes\) but no computewise schema version"):
        Ledger.open(str(path))
    assert path.read_bytes() == before  # not even switched to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


# -- the fast path ----------------------------------------------------------------------------


def test_opening_a_current_ledger_does_not_import_alembic(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    probe = (
        "import sys; from computewise.ledger import Ledger; "
        f"ledger = Ledger.open({str(path)!r}); print(ledger.schema_change is None, 'alembic' in sys.modules)"
    )
    for expected in ("False True", "True False"):  # created (with Alembic), then opened (without)
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        assert done.stdout.strip() == expected


def test_a_file_damaged_after_opening_is_a_ledger_error_on_read_and_write(tmp_path: Path) -> None:
    """What the dashboard meets when the file under a running server is replaced: the ledger's own
    error with its fix, never SQLAlchemy's exception (nothing outside ``ledger/`` imports SQLAlchemy)."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger.open(f"sqlite:///{path}")
    try:
        assert ledger.runs(limit=None) == []
        ledger.engine.dispose()  # the next statement opens the file again, as a new pooled connection would
        path.write_bytes(b"this is not a database, it was overwritten\n" * 200)
        with pytest.raises(LedgerError, match="cannot read the ledger") as read:
            ledger.runs(limit=None)
        assert read.value.hint
        with pytest.raises(LedgerError, match="cannot write to the ledger"):
            ledger.heartbeat(1, 0.0)
    finally:
        ledger.close()
