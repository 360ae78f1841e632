"""The retention policy file: every mistake names its key and says how to fix it; the CLI exits 2 with `To fix:`."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_files import cli, write_file

from computewise.errors import InputError
from computewise.storage import read_policy


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_a_full_policy_reads_back_with_defaults(tmp_path: Path) -> None:
    policy = read_policy(_policy(tmp_path, "keep_last: 3\narchive: {after_days: 30, to: AWS:S3-Glacier-IR}\n"
                                           "delete: {after_days: 180}\n"))  # fmt: skip
    assert policy.keep_last == 3
    assert policy.archive is not None and policy.archive.to == "aws:s3-glacier-ir"
    assert policy.archive.folder == ".computewise-archive" and "dataset" in policy.archive.kinds
    assert policy.delete is not None and policy.delete.kinds == ("checkpoint", "log", "cache")
    assert len(policy.sha256) == 64


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("keep_lats: 3\ndelete: {after_days: 9}\n", "unknown key 'keep_lats'; did you mean 'keep_last'?", "keep_last"),
        ("delete: {after_days: 9, kind: [log]}\n", "unknown key 'delete.kind'; did you mean 'kinds'?", "after_days"),
        ("delete: {after_days: -5}\n", "delete.after_days must be between 0", "positive age"),
        ("delete: {after_days: ten}\n", "delete.after_days must be a number of days", "after_days: 30"),
        ("keep_last: 0\ndelete: {after_days: 9}\n", "keep_last must be a whole number from 1", "at least 1"),
        ("archive: {after_days: 9, to: glacier}\n", "archive.to must name a storage class", "aws:s3-glacier-ir"),
        ("archive: {to: aws:s3-glacier-ir}\n", "archive.after_days is missing", "after_days: 30"),
        ("delete: {after_days: 9, kinds: [logs]}\n", "unknown kind 'logs'; did you mean 'log'?", "kinds are"),
        ("archive: {after_days: 90, to: aws:s3-glacier-ir}\ndelete: {after_days: 30}\n", "must be more than", "raise"),
        ("keep_last: 2\n", "neither archives nor deletes", "delete:"),
        ("- a\n- b\n", "must hold a mapping", "keep_last"),
        ("delete: [\n", "not valid YAML", "keep_last"),
    ],
)
def test_each_mistake_names_its_key(tmp_path: Path, text: str, message: str, hint: str) -> None:
    with pytest.raises(InputError) as caught:
        read_policy(_policy(tmp_path, text))
    assert message in caught.value.message
    assert caught.value.hint is not None and hint in caught.value.hint


@pytest.mark.parametrize(
    ("case", "message", "fix"),
    [
        ("missing path", "no such file or folder", "pass an existing folder"),
        ("unreadable policy", "cannot read policy file", "check the path and its permissions"),
        ("unknown key", "unknown key 'delete_after'", "the keys are: keep_last, archive, delete"),
        ("negative days", "archive.after_days must be between 0", "give a positive age"),
        (
            "unknown storage class",
            "unknown storage class 'aws:s3-glaicer-ir'; did you mean 'aws:s3-glacier-ir'",
            "pick",
        ),
    ],
)
def test_bad_input_exits_2_with_a_fix(tmp_path: Path, case: str, message: str, fix: str) -> None:
    root = tmp_path / "project"
    write_file(root / "a.log", 10, age_days=400)
    policy = tmp_path / "policy.yaml"
    policy.write_text("delete: {after_days: 30}\n")
    target = str(root)
    if case == "missing path":
        target = str(tmp_path / "nowhere")
    elif case == "unreadable policy":
        policy.unlink()
        policy.mkdir()  # a folder where the file should be: unreadable as a file even for root
    elif case == "unknown key":
        policy.write_text("delete_after: 30\n")
    elif case == "negative days":
        policy.write_text("archive: {after_days: -1, to: aws:s3-glacier-ir}\n")
    else:
        policy.write_text("archive: {after_days: 30, to: aws:s3-glaicer-ir}\n")

    done = cli("storage", "apply", target, "--policy", str(policy), "--apply", "--db", str(tmp_path / "l.sqlite"))

    assert done.returncode == 2, done.stderr
    assert f"error: {policy}" in done.stderr or "error:" in done.stderr
    assert message in done.stderr and f"To fix: {fix}" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert (root / "a.log").exists()  # nothing half-done


def test_an_archive_on_a_store_whose_class_cannot_be_set_is_refused_before_anything_is_done(tmp_path: Path) -> None:
    """Azure blobs are listed and priced, but computewise sets classes only on S3 and GCS: say so, do nothing."""
    from computewise.catalog.storage_prices import load_storage_prices
    from computewise.storage import plan_retention
    from computewise.storage.inuse import InUse
    from computewise.storage.inventory import AccessTimes, Inventory
    from computewise.storage.location import Location
    from computewise.storage.pricing import Pricer

    prices = load_storage_prices()
    azure = Location("az://box/runs", None, "az", "box/runs", fs=None)
    inventory = Inventory(azure.text, (), (), frozenset(), AccessTimes(False, "object storage"), 0.0)
    policy = read_policy(_policy(tmp_path, "archive: {after_days: 30, to: azure:blob-cool}\n"))
    pricer = Pricer(prices, prices.price("azure:blob-hot", "eastus"), "azure")
    with pytest.raises(InputError) as caught:
        plan_retention(inventory, azure, policy, pricer, InUse((), ()), 0.0)
    assert "archives objects on s3:// and gs:// only" in caught.value.message
    assert caught.value.hint is not None and "lifecycle" in caught.value.hint
