"""``make test`` relies on ``--dist loadgroup``: the tests marked ``xdist_group("ray")`` share one local Ray
cluster, the MiniLM tests one export and one search, only when their group runs on one worker.

pytest 9.2 silently broke that under pytest-xdist 3.8 (pytest-xdist#1386): every group was split across
the workers, so each started its own cluster and repeated each 100-second fixture. Nothing failed; CI
only got slower and more crowded. This test runs a small suite the way ``make test`` does and fails if a
group is split again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

SUITE = """
import os
import pytest

GROUPED = pytest.mark.xdist_group("shared")


def _record(name, folder):
    (folder / name).write_text(str(os.getpid()))


@pytest.mark.parametrize("index", range(6))
@GROUPED
def test_grouped(index, out):
    _record(f"grouped-{index}", out)


@pytest.mark.parametrize("index", range(6))
def test_free(index, out):
    _record(f"free-{index}", out)


@pytest.fixture
def out():
    from pathlib import Path
    return Path(os.environ["GROUP_TEST_OUT"])
"""


def test_a_marked_group_runs_on_one_worker(tmp_path: Path) -> None:
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")  # not the project's settings
    (suite / "test_suite.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"GROUP_TEST_OUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    grouped = {(out / f"grouped-{i}").read_text() for i in range(6)}
    workers = {(out / f"{kind}-{i}").read_text() for kind in ("grouped", "free") for i in range(6)}
    assert len(workers) == 2, "the suite should use both workers, or the check below proves nothing"
    assert len(grouped) == 1, "xdist_group was split across workers: check the pytest and pytest-xdist pins"
