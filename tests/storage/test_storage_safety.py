"""Each safety rule of ``storage apply``, attacked by a policy that would break it if the rule were missing.

Every test builds a real folder, opens a real SQLite ledger, plans with the real retention rules and,
where it matters, acts on the real files; an aggressive policy (delete everything older than a day)
is the attacker. The checks are on the disk and in the ledger, not on the plan alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_files import cli, snapshot, write_checkpoint, write_file

from computewise.catalog.storage_prices import load_storage_prices
from computewise.ledger import Ledger, NewRun
from computewise.storage import apply_plan, open_location, paths_in_use, plan_retention, read_policy, take_inventory
from computewise.storage.pricing import Pricer
from computewise.storage.retention import PlannedAction, RetentionPlan

DELETE_ALL = (
    "keep_last: 1\ndelete:\n  after_days: 1\n  kinds: [checkpoint, exported model, dataset, log, cache, other]\n"
)


def _plan(root: Path, policy: Path, ledger: Ledger) -> RetentionPlan:
    location = open_location(str(root))
    prices = load_storage_prices()
    pricer = Pricer(prices, prices.price("aws:ebs-gp3", "us-east-1"), None)
    rules = read_policy(policy)
    archive_dir = root / rules.archive.folder if rules.archive is not None else None
    inventory = take_inventory(location, archive_dir)
    return plan_retention(inventory, location, rules, pricer, paths_in_use(ledger), time.time())


def _apply(root: Path, policy: Path, ledger: Ledger) -> None:
    plan = _plan(root, policy, ledger)
    apply_plan(plan, open_location(str(root)), ledger, root / ".computewise-archive")


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger.open(f"sqlite:///{tmp_path / 'ledger.sqlite'}")


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(DELETE_ALL)
    return path


def test_the_newest_checkpoint_stays_even_when_it_is_the_oldest_file(
    tmp_path: Path, policy: Path, ledger: Ledger
) -> None:
    root = tmp_path / "project"
    # The newest by step was written first (a clock gone back, a copy that reset times): by age it is the
    # oldest, 900 days, and every one is past the delete age.
    newest = write_checkpoint(root / "ckpt", step=300, metric=None, age_days=900)
    older = [write_checkpoint(root / "ckpt", step=s, metric=None, age_days=10) for s in (100, 200)]
    lone = write_file(root / "other-run" / "checkpoints" / "last.ckpt", 100, age_days=700)  # no manifest

    _apply(root, policy, ledger)

    assert all(path.exists() for path in newest)
    assert not any(path.exists() for pair in older for path in pair)
    assert lone.exists()  # the only checkpoint of its folder is that folder's newest


def test_the_best_checkpoint_survives_past_the_delete_age(tmp_path: Path, policy: Path, ledger: Ledger) -> None:
    root = tmp_path / "project"
    best = write_checkpoint(root / "run", step=100, metric=0.91, age_days=400)
    worse = write_checkpoint(root / "run", step=200, metric=1.30, age_days=300)
    nan = write_checkpoint(root / "run", step=250, metric=float("nan"), age_days=300)  # NaN is never "best"
    newest = write_checkpoint(root / "run", step=300, metric=1.10, age_days=200)

    _apply(root, policy, ledger)

    assert all(path.exists() for path in (*best, *newest))
    assert not any(path.exists() for path in (*worse, *nan))


def test_two_runs_in_one_folder_each_keep_their_newest_and_best(tmp_path: Path, policy: Path, ledger: Ledger) -> None:
    """Run 2 resumed into run 1's folder and went further: taken as one run, run 1 would lose both its newest and
    its best (run 2's step 400 is newer, its 0.7 better). Per (folder, run id) each keeps its own."""
    root, folder = tmp_path / "project", tmp_path / "project" / "ckpt"
    run_1 = {
        step: write_checkpoint(folder, step, loss, 300, run_id=1) for step, loss in ((100, 0.8), (200, 1.2), (300, 1.0))
    }
    run_2 = {
        step: write_checkpoint(folder, step + 1, loss, 300, run_id=2)  # step+1: distinct file names in one folder
        for step, loss in ((100, 1.5), (200, 0.7), (300, 0.9), (400, 1.1))
    }
    # Worked out by hand: run 1's newest is step 300, its best 0.8 at step 100; run 2's newest 401, best 0.7 at 201.
    survivors = {*run_1[100], *run_1[300], *run_2[200], *run_2[400]}
    everything = {path for pair in (*run_1.values(), *run_2.values()) for path in pair}

    _apply(root, policy, ledger)

    assert {path for path in everything if path.exists()} == survivors


def test_a_checkpoint_whose_manifest_names_a_running_run_is_never_touched(
    tmp_path: Path, policy: Path, ledger: Ledger, new_run: Callable[..., NewRun]
) -> None:
    """The running run's working directory and arguments name no path of the audited folder: only the run id
    in its manifests ties the checkpoints to it. A finished run's identical checkpoints beside them show the
    attacker is real."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    running = ledger.start_run(new_run(cwd=str(elsewhere), command="python train.py", argv=("python", "train.py")))
    finished = ledger.start_run(new_run(cwd=str(elsewhere), command="python train.py", argv=("python", "train.py")))
    ledger.finish_run(finished, "succeeded", time.time(), exit_code=0)
    root = tmp_path / "project"
    mine = [write_checkpoint(root / "ckpt", step, None, 300, run_id=running) for step in (100, 200, 300)]
    done = [write_checkpoint(root / "ckpt", step + 1, None, 300, run_id=finished) for step in (100, 200, 300)]
    untracked = [write_checkpoint(root / "ckpt", step + 2, None, 300) for step in (100, 200)]  # no run id: no claim
    plan = _plan(root, policy, ledger)
    running_reason = f"written by running run {running}"
    claimed = {Path(kept.path).name for kept in plan.kept if kept.reason.startswith(running_reason)}
    assert claimed == {path.name for pair in mine for path in pair}

    _apply(root, policy, ledger)

    assert all(path.exists() for pair in mine for path in pair)
    assert [all(path.exists() for path in pair) for pair in done] == [False, False, True]  # only its newest stays
    assert [all(path.exists() for path in pair) for pair in untracked] == [False, True]


def test_a_running_runs_folder_of_stale_files_is_never_touched(tmp_path: Path, policy: Path) -> None:
    """A real `computewise run` whose working directory is full of year-old files, still running."""
    root = tmp_path / "project"
    busy = root / "busy-run"
    for i in range(5):
        write_file(busy / f"old-{i}.log", 64, age_days=365)
        write_checkpoint(busy / "ckpt", step=i, metric=float(i), age_days=365)
    data = write_file(root / "shared" / "shard.parquet", 64, age_days=365)  # named on its command line only
    loose = write_file(root / "stale.log", 64, age_days=365)
    db = tmp_path / "ledger.sqlite"
    job = subprocess.Popen(
        [*map(str, (sys.executable, "-m", "computewise.cli.app", "run", "--db", db, "--", sys.executable, "-c",
                    "import time; time.sleep(120)", f"--data={data}"))],
        cwd=busy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if db.exists():
                with Ledger.open(str(db)) as ledger:
                    if ledger.runs(status="running"):
                        break
            time.sleep(0.2)
        else:
            pytest.fail("the run never showed as running in the ledger")
        before = snapshot(busy)
        done = cli("storage", "apply", str(root), "--policy", str(policy), "--apply", "--db", str(db))
        assert done.returncode == 0, done.stderr
    finally:
        job.terminate()
        job.wait(timeout=30)
    assert snapshot(busy) == before
    assert data.exists()
    assert not loose.exists()  # the attacker was real: outside the run's paths it deleted


def test_a_file_tagged_keep_stays_past_every_age(tmp_path: Path, ledger: Ledger) -> None:
    root = tmp_path / "project"
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "keep_last: 1\narchive: {after_days: 1, to: aws:s3-glacier-deep}\n"
        "delete: {after_days: 2, kinds: [checkpoint, exported model, dataset, log, cache, other]}\n"
    )
    tagged = write_file(root / "models" / "final.onnx", 500, age_days=5000)
    write_file(root / "models" / "final.onnx.keep", 0, age_days=5000)
    folder = [write_file(root / "golden" / "sub" / f"{i}.parquet", 500, age_days=5000) for i in range(3)]
    write_file(root / "golden" / ".keep", 0, age_days=5000)
    checkpoint = write_checkpoint(root / "run", step=1, metric=0.5, age_days=5000)
    write_checkpoint(root / "run", step=2, metric=0.4, age_days=5000)  # newest and best
    write_file(root / "run" / "step-00000001.keep", 0, age_days=5000)  # tags the checkpoint as a whole
    untagged = write_file(root / "models" / "draft.onnx", 500, age_days=5000)

    _apply(root, policy, ledger)

    assert all(path.exists() for path in (tagged, *folder, *checkpoint))
    assert not untagged.exists()


def test_a_second_apply_right_after_the_first_changes_nothing(tmp_path: Path, ledger: Ledger) -> None:
    root = tmp_path / "project"
    policy = tmp_path / "policy.yaml"
    policy.write_text("keep_last: 2\narchive: {after_days: 30, to: aws:s3-glacier-ir}\ndelete: {after_days: 90}\n")
    for step in range(6):
        write_checkpoint(root / "run", step=step, metric=1.0 / (step + 1), age_days=200 - 30 * step)
    write_file(root / "logs" / "train.log", 100, age_days=120)
    write_file(root / "data" / "a.parquet", 100, age_days=45)

    _apply(root, policy, ledger)
    after_first = snapshot(root)
    applies = ledger.storage_applies()
    assert len(applies) == 1 and applies[0].status == "finished"

    assert _plan(root, policy, ledger).actions == ()
    _apply(root, policy, ledger)
    assert snapshot(root) == after_first
    assert len(ledger.storage_applies()) == 1  # nothing to do records nothing


def test_a_file_that_vanishes_mid_apply_leaves_a_consistent_ledger_record(
    tmp_path: Path, policy: Path, ledger: Ledger
) -> None:
    root = tmp_path / "project"
    files = [write_file(root / "logs" / f"{i}.log", 1000 * (i + 1), age_days=30) for i in range(6)]
    plan = _plan(root, policy, ledger)
    assert len(plan.actions) == 6
    victim = plan.actions[4].entry.path

    def someone_else_deletes(number: int, action: PlannedAction) -> None:
        if number == 2:
            os.unlink(victim)  # removed by another process while the apply is on file 2

    result = apply_plan(plan, open_location(str(root)), ledger, None, someone_else_deletes)

    rows = ledger.storage_actions(result.apply_id or 0)
    assert [row.outcome for row in rows].count("vanished") == 1
    assert next(row for row in rows if row.path == victim).outcome == "vanished"
    assert not any(path.exists() for path in files)
    # What the ledger says was freed is exactly what this apply removed: all but the vanished file.
    freed = sum(row.size_bytes for row in rows if row.outcome == "done")
    assert freed == sum(1000 * (i + 1) for i in range(6)) - plan.actions[4].entry.size_bytes
    totals = ledger.storage_done_totals(None, time.time() + 1)
    assert totals["delete"][:2] == (5, freed)
    assert ledger.storage_applies()[0].status == "finished"


def test_an_apply_killed_halfway_records_what_it_reached_and_no_more(
    tmp_path: Path, policy: Path, ledger: Ledger
) -> None:
    root = tmp_path / "project"
    for i in range(8):
        write_file(root / "cache" / f"{i}.bin", 100 + i, age_days=30)
    plan = _plan(root, policy, ledger)

    def interrupted(number: int, action: PlannedAction) -> None:
        if number == 3:
            raise KeyboardInterrupt  # Ctrl-C between two files

    with pytest.raises(KeyboardInterrupt):
        apply_plan(plan, open_location(str(root)), ledger, None, interrupted)

    (applied,) = ledger.storage_applies()
    assert applied.status == "interrupted" and applied.finished_at_s is not None
    rows = ledger.storage_actions(applied.id)
    assert [row.outcome for row in rows] == ["done"] * 3 + ["planned"] * 5
    on_disk = {str(path) for path in (root / "cache").iterdir()}
    assert on_disk == {row.path for row in rows if row.outcome == "planned"}


def test_a_dry_run_changes_nothing_on_disk_or_in_the_ledger(tmp_path: Path, policy: Path) -> None:
    root = tmp_path / "project"
    write_checkpoint(root / "run", step=1, metric=0.3, age_days=400)
    write_checkpoint(root / "run", step=2, metric=0.2, age_days=300)
    write_checkpoint(root / "run", step=3, metric=0.4, age_days=200)
    write_file(root / "logs" / "a.log", 10, age_days=100)
    before = snapshot(root)
    db = tmp_path / "ledger.sqlite"
    Ledger.open(str(db)).close()

    done = cli("storage", "apply", str(root), "--policy", str(policy), "--db", str(db))

    assert done.returncode == 0, done.stderr
    assert "dry run: nothing changed" in done.stdout and "step-00000001" in done.stdout
    assert snapshot(root) == before
    with Ledger.open(str(db)) as ledger:
        assert ledger.storage_applies() == []
