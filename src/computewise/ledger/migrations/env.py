"""Alembic environment: migrate the connection computewise hands over, inside its transaction.

``computewise.ledger.migrate`` opens the connection, takes the migration lock (``BEGIN IMMEDIATE``
on SQLite, an advisory lock on PostgreSQL) and passes it in ``config.attributes["connection"]``;
all revisions then commit or roll back together. Without one (a developer running
``alembic revision --autogenerate`` with ``sqlalchemy.url`` set) an engine is made from the URL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from computewise.ledger.schema import metadata


def _run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


_given = context.config.attributes.get("connection")
if _given is not None:
    _run(_given)
else:
    with sa.create_engine(context.config.get_main_option("sqlalchemy.url", "")).connect() as _connection:
        _run(_connection)
        _connection.commit()
