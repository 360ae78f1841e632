"""Sixteen real writer processes share one ledger (a new SQLite file, a new PostgreSQL database).

They open it at the same moment (so they race to create the schema), each start a run, then insert
their samples concurrently once released together. Every row must arrive: no "database is
locked", no lost batch, the schema created once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from computewise.ledger import Ledger, schema

WRITER = Path(__file__).with_name("ledger_writer.py")
PROCESSES = 16
BATCHES = 25
BATCH_SIZE = 10


def test_sixteen_writer_processes_lose_no_rows(ledger_url: str) -> None:
    writers = [
        subprocess.Popen(
            [sys.executable, str(WRITER), "write", ledger_url, str(BATCHES), str(BATCH_SIZE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        run_ids = []
        for writer in writers:
            assert writer.stdout is not None
            line = writer.stdout.readline()
            assert line.startswith("ready"), writer.communicate(timeout=30)[1]
            run_ids.append(int(line.split()[1]))
        for writer in writers:  # release them together
            assert writer.stdin is not None
            writer.stdin.write("go\n")
            writer.stdin.flush()
        deadline_s = time.monotonic() + 120
        for writer in writers:
            out, err = writer.communicate(timeout=max(1.0, deadline_s - time.monotonic()))
            assert writer.returncode == 0, err
            assert out.strip() == "done"
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait()

    assert len(set(run_ids)) == PROCESSES
    with Ledger.open(ledger_url) as ledger, ledger.engine.connect() as conn:
        per_run: dict[int, int] = dict(
            conn.execute(sa.select(schema.samples.c.run_id, sa.func.count()).group_by(schema.samples.c.run_id)).all()
        )
        gpu_rows = conn.execute(sa.select(sa.func.count()).select_from(schema.gpu_samples)).scalar_one()
        versions = conn.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar_one()
        statuses = {run.status for run in ledger.runs(limit=None)}
    assert per_run == {run_id: BATCHES * BATCH_SIZE for run_id in run_ids}
    assert gpu_rows == PROCESSES * BATCHES * BATCH_SIZE
    assert versions == 1
    assert statuses == {"succeeded"}
