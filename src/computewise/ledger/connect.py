"""Resolve the ledger URL and open an engine tuned for many small concurrent writers.

Placeholder schema creation; ``migrate`` (Alembic) replaces ``create_all``.
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from platformdirs import user_data_dir

from computewise.ledger.schema import metadata

__all__ = ["connect", "default_url"]

ENV_VAR = "COMPUTEWISE_DB"


def default_url() -> str:
    """``$COMPUTEWISE_DB`` or a SQLite file in the user's data directory."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    return f"sqlite:///{Path(user_data_dir('computewise')) / 'ledger.sqlite'}"


def connect(url: str | None) -> tuple[sa.Engine, str]:
    resolved = url or default_url()
    if resolved.startswith("sqlite:///"):
        Path(resolved.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(resolved)
    metadata.create_all(engine)
    return engine, resolved
