"""The inventory, the duplicate search and the storage price table, each against an independent account."""

from __future__ import annotations

import hashlib
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_files import DAY_S, write_checkpoint, write_file

from computewise.catalog.storage_prices import load_storage_prices
from computewise.errors import CatalogError, InputError, UnknownNameError
from computewise.storage import find_duplicates, open_location, take_inventory
from computewise.storage.audit import build_audit
from computewise.storage.inventory import access_times
from computewise.storage.pricing import Pricer


@pytest.mark.torch
def test_checkpoints_saved_by_train_are_recognised_with_run_step_and_metric(tmp_path: Path) -> None:
    """Checkpoints written by the real ``CheckpointStore`` (torch), not by hand."""
    import torch

    from computewise.train.checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path / "exp" / "ckpt", keep_last=5)
    for step, loss in ((10, 2.5), (20, 1.25), (30, 1.75)):
        store.save({"w": torch.zeros(8)}, step, metric=loss)
    inventory = take_inventory(open_location(str(tmp_path)))
    assert [(c.run, c.step, c.metric) for c in inventory.checkpoints] == [
        ("exp/ckpt", 10, 2.5), ("exp/ckpt", 20, 1.25), ("exp/ckpt", 30, 1.75)
    ]  # fmt: skip
    assert all(len(c.files) == 2 for c in inventory.checkpoints)
    assert {e.kind for e in inventory.entries} == {"checkpoint"}
    assert sum(c.size_bytes for c in inventory.checkpoints) == sum(
        p.stat().st_size for p in (tmp_path / "exp" / "ckpt").iterdir()
    )


def test_the_audit_describes_each_ledger_run_of_a_shared_folder_as_its_own_run(
    tmp_path: Path, json_schema: Callable[[object, str], None]
) -> None:
    """One folder, checkpoints of ledger runs 7 and 9 and two from before manifests named a run: three runs."""
    folder = tmp_path / "exp" / "ckpt"
    for step, loss in ((10, 2.0), (20, 1.5)):
        write_checkpoint(folder, step, loss, 5, run_id=7)
    for step, loss in ((30, 1.75), (40, 1.25), (50, 1.5)):
        write_checkpoint(folder, step, loss, 3, run_id=9)
    for step, loss in ((1, 3.0), (2, 2.5)):
        write_checkpoint(folder, step, loss, 9)  # no run_id key at all
    write_file(tmp_path / "other" / "checkpoints" / "last.ckpt", 64, 1)  # no manifest: no run id either
    prices = load_storage_prices()
    pricer = Pricer(prices, prices.price("aws:ebs-gp3", "us-east-1"), None)
    location = open_location(str(tmp_path))
    inventory = take_inventory(location)
    audit = build_audit(inventory, find_duplicates(location, inventory.entries), pricer, time.time(), 0.0)

    rows = [(r.run, r.run_id, r.checkpoints, r.newest_step, r.best, r.best_metric) for r in audit.runs]
    assert rows == [
        ("exp/ckpt", None, 2, 2, "step-00000002", 2.5),
        ("exp/ckpt", 7, 2, 20, "step-00000020", 1.5),
        ("exp/ckpt", 9, 3, 50, "step-00000040", 1.25),
        ("other/checkpoints", None, 1, None, None, None),
    ]
    document = audit.to_dict()
    json_schema(document, "storage-audit")
    assert [row["run_id"] for row in document["runs"]] == [None, 7, 9, None]


def test_kinds_sizes_and_ages_match_the_files_written(tmp_path: Path) -> None:
    written = {
        "ckpt/run1/last.ckpt": ("checkpoint", 300, 40),
        "checkpoints/model.safetensors": ("checkpoint", 200, 10),
        "export/model.onnx": ("exported model", 500, 5),
        "export/weights.safetensors": ("exported model", 400, 5),
        "data/train-000.parquet": ("dataset", 1000, 90),
        "data/shard-0001.tar": ("dataset", 900, 90),
        "logs/run.txt": ("log", 50, 2),
        "job.log": ("log", 60, 2),
        "tb/events.out.tfevents.1700000000.host": ("log", 70, 3),
        ".cache/huggingface/blob": ("cache", 80, 1),
        "src/__pycache__/x.cpython-311.pyc": ("cache", 30, 1),
        ".ipynb_checkpoints/nb-checkpoint.ipynb": ("cache", 20, 1),
        "notes.md": ("other", 10, 0),
    }
    for relative, (_, size, age) in written.items():
        write_file(tmp_path / relative, size, age)
    (tmp_path / "link.onnx").symlink_to(tmp_path / "export" / "model.onnx")  # links are not listed
    write_file(tmp_path / "export" / "model.onnx.keep", 0, 0)

    inventory = take_inventory(open_location(str(tmp_path)))

    got = {e.relative: (e.kind, e.size_bytes, round((time.time() - e.mtime_s) / DAY_S)) for e in inventory.entries}
    assert got == {relative: (kind, size, age) for relative, (kind, size, age) in written.items()}
    assert inventory.keep_markers == {"export/model.onnx.keep"}


def test_access_times_follow_the_mount_options(tmp_path: Path) -> None:
    note = access_times(tmp_path)
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        options = [line.split()[3] for line in mounts if len(line.split()) > 3]
    assert note.kept == ("noatime" not in note.note)
    assert any(word in note.note for word in ("noatime", "relatime", "strictatime"))
    assert options  # the note was read from a real mount table
    assert access_times(None).kept is False


def test_duplicates_agree_with_hashing_every_file(tmp_path: Path) -> None:
    same = os.urandom(5000)
    for i in range(4):
        write_file(tmp_path / f"copy{i}" / "model.bin", 0, 1, same)
    write_file(tmp_path / "near" / "model.bin", 0, 1, same[:-1] + b"x")  # same size, other content
    for i in range(30):
        write_file(tmp_path / "misc" / f"{i}.dat", 1 + i % 7, 1)  # many colliding sizes, random content
    write_file(tmp_path / "empty1", 0, 1, b"")
    write_file(tmp_path / "empty2", 0, 1, b"")

    location = open_location(str(tmp_path))
    inventory = take_inventory(location)
    found = find_duplicates(location, inventory.entries)

    # The second implementation: hash every file, no size grouping, no threads.
    by_hash: dict[str, list[str]] = defaultdict(list)
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size > 0:
            by_hash[hashlib.sha256(path.read_bytes()).hexdigest()].append(str(path))
    expected = {digest: sorted(paths) for digest, paths in by_hash.items() if len(paths) > 1}
    assert {g.sha256: list(g.paths) for g in found.groups} == expected
    assert found.groups[0].wasted_bytes == 3 * 5000
    assert found.hashed_files < len(inventory.entries)  # unique sizes were never read


def test_the_audit_prices_each_file_at_its_class(tmp_path: Path) -> None:
    write_file(tmp_path / "a.parquet", 3 * 2**20, 10)
    write_file(tmp_path / ".computewise-archive" / "aws:s3-glacier-deep" / "old.parquet", 2**30, 100, b"")
    prices = load_storage_prices()
    pricer = Pricer(prices, prices.price("aws:ebs-gp3", "us-east-1"), None)
    location = open_location(str(tmp_path))
    inventory = take_inventory(location)
    audit = build_audit(inventory, find_duplicates(location, inventory.entries), pricer, time.time(), 0.0)
    classes = {row.storage_class: row for row in audit.classes}
    assert classes["aws:ebs-gp3"].usd_per_month == pytest.approx(3 / 1024 * 0.08)  # $0.08 per GiB-month
    assert classes["aws:s3-glacier-deep"].files == 1
    assert audit.to_dict()["files"] == 2


def test_the_storage_price_table_covers_the_classes_with_a_source_each() -> None:
    prices = load_storage_prices()
    names = set(prices.names())
    for name in (
        "aws:s3-standard", "aws:s3-standard-ia", "aws:s3-glacier-ir", "aws:s3-glacier-flexible", "aws:s3-glacier-deep",
        "gcp:gcs-standard", "gcp:gcs-nearline", "gcp:gcs-coldline", "gcp:gcs-archive",
        "azure:blob-hot", "azure:blob-cool", "azure:blob-cold", "azure:blob-archive",
        "aws:ebs-gp3", "gcp:pd-balanced", "azure:premium-ssd",
    ):  # fmt: skip
        assert name in names
    assert all(row.source and row.retrieved for row in prices.rows)
    # Each cloud's object classes get cheaper as they get colder, per region (the pricing pages' order).
    for cloud, order in (
        ("aws", ("s3-standard", "s3-standard-ia", "s3-glacier-ir", "s3-glacier-flexible", "s3-glacier-deep")),
        ("gcp", ("gcs-standard", "gcs-nearline", "gcs-coldline", "gcs-archive")),
        ("azure", ("blob-hot", "blob-cool", "blob-cold", "blob-archive")),
    ):
        regions = {row.region for row in prices.rows if row.cloud == cloud and row.kind == "object"}
        for region in regions:
            usd = [prices.price(f"{cloud}:{name}", region).usd_per_gib_month for name in order]
            assert usd == sorted(usd, reverse=True) and len(set(usd)) == len(usd)
    assert prices.by_api_name("aws", "STANDARD_IA", "us-east-1") == prices.price("aws:s3-standard-ia", "us-east-1")


def test_bad_storage_price_rows_and_names_are_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "storage_prices.csv"
    header = "cloud,storage_class,kind,region,usd_per_gib_month,min_storage_days,api_name,source,retrieved\n"
    bad.write_text(header + "aws,s3-x,object,us-east-1,-1,0,X,somewhere,2025-06-01\n")
    with pytest.raises(CatalogError, match="usd_per_gib_month"):
        load_storage_prices(bad)
    bad.write_text(header + "aws,s3-x,tape,us-east-1,1,0,X,somewhere,2025-06-01\n")
    with pytest.raises(CatalogError, match="'tape' is not a storage kind"):
        load_storage_prices(bad)
    prices = load_storage_prices()
    with pytest.raises(UnknownNameError, match="did you mean 'aws:s3-standard'"):
        prices.price("aws:s3-standrd", "us-east-1")
    with pytest.raises(InputError, match="no price for storage class aws:s3-standard in region 'mars-1'"):
        prices.price("aws:s3-standard", "mars-1")
