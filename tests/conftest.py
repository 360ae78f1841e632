"""Shared fixtures: the real bundled catalog and its assumptions; real ledgers on SQLite and PostgreSQL.

``postgres_server`` starts a real PostgreSQL for the test session (one per xdist worker): ``initdb``
in a temporary directory (as the ``postgres`` user when we are root, since PostgreSQL refuses to
run as root), listening on 127.0.0.1 only on a free port, password authentication over TCP, stopped
by ``pg_ctl`` (or its PID) at the end. Without the binaries the PostgreSQL tests are skipped, unless
``COMPUTEWISE_REQUIRE_POSTGRES=1`` (``make test``, CI), where that is an error.

Tests marked ``gpu`` need an NVIDIA GPU: they are skipped, with the reason, where none is visible
(``torch.cuda.is_available()`` when torch is installed, else no ``nvidia-smi`` on PATH), and
``pytest -m gpu`` runs exactly them on the lent accelerator.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from computewise.catalog import Catalog, load_catalog
from computewise.estimate import Assumptions
from computewise.ledger import Ledger, NewRun, PriceSnapshot, SampleRow
from computewise.system.ports import free_port
from computewise.system.user import current_user
from gcs_server import GcsServer, running_gcs_server
from prices import given_price
from s3_server import S3Server, running_s3_server

# -- The user's own catalog stays out ---------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Point the user catalog at an empty directory for the whole run, child processes included.

    A developer's ``bench --save`` calibration or price override in ``~/.config/computewise/catalog``
    would otherwise move every estimate a test checks; tests that need a user catalog set their own.
    """
    os.environ["COMPUTEWISE_CATALOG_DIR"] = tempfile.mkdtemp(prefix="computewise-no-user-catalog-")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ.pop("COMPUTEWISE_CATALOG_DIR", ""), ignore_errors=True)


# -- GPU tests ----------------------------------------------------------------------------------


def _no_gpu_reason() -> str | None:
    """Why no NVIDIA GPU is visible to the tests, or None when one is.

    torch decides where it is installed (the GPU tests run through it); without torch a visible
    ``nvidia-smi`` is the sign of a driver, which is what the NVML tests need.
    """
    try:
        import torch
    except ImportError:
        return None if shutil.which("nvidia-smi") else "needs an NVIDIA GPU: no nvidia-smi on PATH (no driver)"
    return None if torch.cuda.is_available() else "needs an NVIDIA GPU: torch.cuda.is_available() is False"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests marked ``gpu`` where no GPU is visible; look only when some were collected."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_tests:
        return  # importing torch costs seconds: not for a run without GPU tests
    reason = _no_gpu_reason()
    if reason is not None:
        for item in gpu_tests:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def assumptions(catalog: Catalog) -> Assumptions:
    return Assumptions.from_catalog(catalog)


# -- PostgreSQL -------------------------------------------------------------------------------

REQUIRE_POSTGRES = os.environ.get("COMPUTEWISE_REQUIRE_POSTGRES") == "1"
_PG_USER = "computewise"


@dataclass(frozen=True)
class PostgresServer:
    """A running test server: ``url(db)`` for the ledger, ``create``/``drop`` for fresh databases."""

    port: int
    password: str
    socket_dir: Path

    def url(self, database: str, password: str | None = None) -> str:
        return f"postgresql://{_PG_USER}:{password or self.password}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        conninfo = f"host=127.0.0.1 port={self.port} user={_PG_USER} password={self.password} dbname={database}"
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.encode())

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex}"
        self.admin(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _postgres_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: from PATH, else Debian's newest version."""
    dirs = []
    if found := shutil.which("pg_ctl"):
        dirs.append(Path(found).resolve().parent)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    for candidate in [*dirs, *versions]:
        if (candidate / "pg_ctl").is_file() and (candidate / "initdb").is_file():
            return candidate
    return None


def _unavailable(reason: str) -> None:
    if REQUIRE_POSTGRES:
        pytest.fail(
            f"{reason}, and COMPUTEWISE_REQUIRE_POSTGRES=1 demands a real PostgreSQL: run scripts/ensure-postgres.sh",
            pytrace=False,
        )
    pytest.skip(reason)


def _run(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = _postgres_bin_dir()
    if bin_dir is None:
        _unavailable("PostgreSQL binaries (initdb, pg_ctl) not found on PATH or under /usr/lib/postgresql")
    assert bin_dir is not None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[dev]')")
    base = Path(tempfile.mkdtemp(prefix="computewise-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base)
            _unavailable("running as root and there is no 'postgres' user to run PostgreSQL as")
        os.chown(base, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log = base / "data", base / "server.log"
    password = secrets.token_hex(8)
    pwfile = base / "password"
    pwfile.write_text(password + "\n")
    if as_user:
        os.chown(pwfile, owner.pw_uid, owner.pw_gid)
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", _PG_USER, f"--pwfile={pwfile}", "-E", "UTF8"]
    done = _run([*as_user, *initdb, "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"], 120)
    if done.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"initdb failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
    pg_ctl = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data)]
    options = "-c listen_addresses=127.0.0.1 -c unix_socket_directories={sock} -c port={port} " + (
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    for _attempt in range(3):  # another process may take the free port between probe and bind
        port = free_port()
        started = _run(
            [*pg_ctl, "-l", str(log), "-w", "-t", "60", "-o", options.format(sock=base, port=port), "start"], 90
        )
        if started.returncode == 0:
            break
    else:
        server_log = log.read_text() if log.exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start:\n{started.stdout}\n{started.stderr}\n{server_log}", pytrace=False)
    try:
        yield PostgresServer(port=port, password=password, socket_dir=base)
    finally:
        _stop_postgres(pg_ctl, data)
        shutil.rmtree(base, ignore_errors=True)


def _stop_postgres(pg_ctl: list[str], data: Path) -> None:
    pid_file = data / "postmaster.pid"
    pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
    try:
        if _run([*pg_ctl, "-m", "fast", "-w", "-t", "30", "stop"], 45).returncode == 0:
            return
    except subprocess.TimeoutExpired:
        pass
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# -- ledgers ----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of a new, empty ledger: a SQLite file, or a fresh database on the session's PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.create_database()
    yield server.url(name)
    server.drop_database(name)


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    """An opened (created, migrated) ``Ledger`` on ``ledger_url``."""
    opened = Ledger.open(ledger_url)
    yield opened
    opened.close()


@pytest.fixture
def price() -> Callable[..., PriceSnapshot]:
    """The price factory of tests/prices.py (``given_price``), for tests that take fixtures."""
    return given_price


@pytest.fixture
def new_run() -> Callable[..., NewRun]:
    """A factory of realistic ``NewRun`` values (a training job on this host, now); keywords override fields."""

    def make(**overrides: Any) -> NewRun:
        values: dict[str, Any] = {
            "kind": "command",
            "command": "python train.py --epochs 3",
            "argv": ("python", "train.py", "--epochs", "3"),
            "tags": {"team": "nlp", "project": "llama-ft"},
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "user": current_user(),
            "cwd": str(Path.cwd()),
            "started_at_s": time.time(),
            "interval_s": 1.0,
            "price": given_price(
                32.77,
                source="catalog offerings.csv: aws p4d.24xlarge on-demand us-east-1",
                explanation="AWS p4d.24xlarge on-demand in us-east-1 (8x A100 40GB)",
                cloud="aws",
                instance_type="p4d.24xlarge",
                pricing="on-demand",
                region="us-east-1",
            ),
            "gpu_count": 8,
            "gpu_name": "NVIDIA A100-SXM4-40GB",
            "accelerator": "a100-40gb",
        }
        values.update(overrides)
        return NewRun(**values)

    return make


@pytest.fixture
def sample_rows() -> Callable[[int, float, int], list[SampleRow]]:
    """``count`` one-second samples of a busy 8-GPU training job, the first at ``start_s``."""

    def make(run_id: int, start_s: float, count: int) -> list[SampleRow]:
        return [
            SampleRow(
                run_id=run_id,
                t_s=start_s + i,
                interval_s=1.0,
                cpu_percent=185.0 + i % 7,
                rss_bytes=12_400_000_000 + 1_000_000 * i,
                read_bytes=48_000_000,
                write_bytes=1_200_000,
                net_sent_bytes=3_000_000,
                net_recv_bytes=2_500_000,
                host_cpu_percent=41.5,
                host_memory_used_bytes=210_000_000_000,
                gpu_count=8,
                gpu_util_pct=87.0 + i % 5,
                gpu_memory_used_bytes=8 * 35_500_000_000,
                gpu_power_w=8 * 312.0,
                energy_j=8 * 312.0 + 95.0,
                energy_measured=True,
                idle=False,
            )
            for i in range(count)
        ]

    return make


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], str]]:
    """Write ``name.py`` (an entry point, an eval function, a model) into tmp_path, importable for this test only."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    yield make
    for name in [name for name, module in sys.modules.items() if str(tmp_path) in str(getattr(module, "__file__", ""))]:
        del sys.modules[name]


# -- S3 ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3-compatible server (moto) on 127.0.0.1 for the session: ``.endpoint_url``, ``.env`` and
    ``.make_bucket(name)``; pass ``.env`` to child processes (or monkeypatch it in) to reach it."""
    with running_s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    """A real Google Cloud Storage emulator on 127.0.0.1 for the session: ``.endpoint_url``, ``.env``,
    ``.fs()`` and ``.make_bucket(name)``; pass ``.env`` to child processes to reach it."""
    with running_gcs_server() as server:
        yield server


# -- JSON documents -------------------------------------------------------------------------------

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "schemas"


@pytest.fixture(scope="session")
def json_schema() -> Callable[[object, str], None]:
    """``check(document, name)``: ``document`` is valid against ``docs/schemas/<name>.schema.json`` (draft 2020-12)."""
    import json

    import jsonschema

    def check(document: object, name: str) -> None:
        schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft202012Validator(schema).validate(document)

    return check
