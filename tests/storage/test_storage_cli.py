"""``computewise storage audit|apply`` end to end: local folders and a real S3 server (moto on 127.0.0.1).

The documents are checked against their JSON Schemas, the S3 objects through the real boto3 client
(their storage class after an archive, their absence after a delete), and ``cost report --json``
against the ledger rows the apply wrote.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from storage_files import cli, write_checkpoint, write_file

from computewise.ledger import Ledger
from computewise.units import format_usd
from gcs_server import GcsServer
from s3_server import S3Server

Check = Callable[[object, str], None]


def _json(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return data


def test_local_audit_apply_and_cost_report(tmp_path: Path, json_schema: Check) -> None:
    root = tmp_path / "project"
    for step, loss, age in ((1, 0.5, 400), (2, 0.3, 300), (3, 0.7, 200), (4, 0.6, 100)):
        write_checkpoint(root / "runs" / "a", step, loss, age, size_bytes=2**20)
    write_file(root / "logs" / "train.log", 5000, 365)
    write_file(root / "data" / "train.parquet", 2**20, 60)
    write_file(root / "data" / "copy.parquet", 0, 60, (root / "data" / "train.parquet").read_bytes())
    policy = tmp_path / "policy.yaml"
    policy.write_text("keep_last: 1\narchive: {after_days: 30, to: aws:s3-glacier-deep}\ndelete: {after_days: 180}\n")
    db = tmp_path / "ledger.sqlite"

    audit = _json(cli("storage", "audit", str(root), "--json"))
    json_schema(audit, "storage-audit")
    assert audit["files"] == 11 and audit["duplicates"]["groups"] == 1
    assert audit["runs"][0]["newest_step"] == 4 and audit["runs"][0]["best"] == "step-00000002"

    dry = _json(cli("storage", "apply", str(root), "--policy", str(policy), "--db", str(db), "--json"))
    json_schema(dry, "storage-apply")
    assert dry["dry_run"] is True
    deleted = {Path(a["path"]).name for a in dry["actions"] if a["action"] == "delete"}
    assert deleted == {"step-00000001.pt", "step-00000001.json", "step-00000003.pt", "step-00000003.json", "train.log"}

    done = _json(cli("storage", "apply", str(root), "--policy", str(policy), "--db", str(db), "--json", "--apply"))
    json_schema(done, "storage-apply")
    assert {a["outcome"] for a in done["actions"]} == {"done"}
    archived = root / ".computewise-archive" / "aws:s3-glacier-deep" / "data" / "train.parquet"
    assert archived.exists() and not (root / "data" / "train.parquet").exists()

    report = _json(cli("cost", "report", "--db", str(db), "--json"))
    with Ledger.open(str(db)) as ledger:
        rows = ledger.storage_actions(ledger.storage_applies()[0].id)
    storage = report["storage"]
    assert storage["deleted_files"] == sum(1 for r in rows if r.action == "delete") == 5
    assert storage["archived_bytes"] == sum(r.size_bytes for r in rows if r.action == "archive") == 2 * 2**20
    assert abs(storage["usd_per_month_saved"] - sum(r.usd_per_month_saved for r in rows)) < 1e-12

    table = cli("cost", "report", "--db", str(db))
    assert "storage: deleted 5 files" in table.stdout


def test_an_s3_prefix_is_audited_archived_and_pruned(s3_server: S3Server, tmp_path: Path, json_schema: Check) -> None:
    s3_server.make_bucket("storage-cli")
    client: Any = s3_server.client()
    prefix = f"exp-{time.time_ns()}"
    blob = bytes(range(256)) * 64
    for step, loss in ((1, 0.9), (2, 0.4), (3, 0.8)):
        manifest = {
            "format": "computewise.checkpoint/1", "step": step, "file": f"step-{step:08d}.pt", "sha256": "0" * 64,
            "size_bytes": 4096, "metric": loss, "higher_is_better": False, "saved_at_s": 0.0,
        }  # fmt: skip
        client.put_object(Bucket="storage-cli", Key=f"{prefix}/ckpt/step-{step:08d}.pt", Body=bytes([step]) * 4096)
        client.put_object(Bucket="storage-cli", Key=f"{prefix}/ckpt/step-{step:08d}.json", Body=json.dumps(manifest))
    client.put_object(Bucket="storage-cli", Key=f"{prefix}/data/a.parquet", Body=blob)
    client.put_object(Bucket="storage-cli", Key=f"{prefix}/data/b.parquet", Body=blob)  # a duplicate
    client.put_object(Bucket="storage-cli", Key=f"{prefix}/logs/train.log", Body=b"loss 0.4\n")
    url = f"s3://storage-cli/{prefix}"
    env = s3_server.env

    audit = _json(cli("storage", "audit", url, "--json", env=env))
    json_schema(audit, "storage-audit")
    assert audit["files"] == 9
    assert {row["kind"]: row["files"] for row in audit["kinds"]} == {"checkpoint": 6, "dataset": 2, "log": 1}
    assert [row["storage_class"] for row in audit["classes"]] == ["aws:s3-standard"]
    assert audit["runs"] == [
        {"run": "ckpt", "run_id": None, "checkpoints": 3, "recognised": True, "newest": "step-00000003",
         "newest_step": 3, "best": "step-00000002", "best_metric": 0.4, "size_bytes": audit["runs"][0]["size_bytes"]}
    ]  # fmt: skip
    assert audit["duplicates"]["groups"] == 1 and audit["duplicates"]["wasted_bytes"] == len(blob)

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "keep_last: 1\narchive: {after_days: 30, to: aws:s3-glacier-ir}\ndelete: {after_days: 180, kinds: [log]}\n"
    )
    later = (datetime.now(UTC) + timedelta(days=400)).strftime("%Y-%m-%d")  # objects' ages cannot be set in S3
    args = ("storage", "apply", url, "--policy", str(policy), "--as-of", later, "--db", str(tmp_path / "l.sqlite"))
    done = _json(cli(*args, "--apply", "--json", env=env))
    json_schema(done, "storage-apply")
    assert {a["outcome"] for a in done["actions"]} == {"done"}

    def storage_class(key: str) -> str:
        return str(client.head_object(Bucket="storage-cli", Key=f"{prefix}/{key}").get("StorageClass", "STANDARD"))

    assert storage_class("ckpt/step-00000001.pt") == "GLACIER_IR"
    assert storage_class("data/a.parquet") == storage_class("data/b.parquet") == "GLACIER_IR"
    assert storage_class("ckpt/step-00000002.pt") == storage_class("ckpt/step-00000003.pt") == "STANDARD"
    listed = client.list_objects_v2(Bucket="storage-cli", Prefix=f"{prefix}/logs/").get("Contents", [])
    assert listed == []

    again = cli(*args, "--apply", env=env)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout


def test_an_object_deleted_by_someone_else_mid_apply_is_recorded_as_vanished(
    s3_server: S3Server, tmp_path: Path, monkeypatch: Any
) -> None:
    """In process, so another client can delete an object between two actions (the apply's progress hook)."""
    import fsspec.config

    from computewise.catalog.storage_prices import load_storage_prices
    from computewise.storage import apply_plan, open_location, plan_retention, read_policy, take_inventory
    from computewise.storage.inuse import InUse
    from computewise.storage.pricing import Pricer
    from computewise.storage.retention import PlannedAction

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    conf: dict[str, Any] = {}
    fsspec.config.set_conf_env(conf)  # fsspec reads FSSPEC_S3_* at import: read them again for this test
    monkeypatch.setattr(fsspec.config, "conf", {**fsspec.config.conf, **conf})
    s3_server.make_bucket("storage-vanish")
    client: Any = s3_server.client()
    prefix = f"logs-{time.time_ns()}"
    for i in range(4):
        client.put_object(Bucket="storage-vanish", Key=f"{prefix}/{i}.log", Body=b"x" * (100 + i))
    location = open_location(f"s3://storage-vanish/{prefix}")
    policy = tmp_path / "policy.yaml"
    policy.write_text("delete: {after_days: 1, kinds: [log]}\n")
    prices = load_storage_prices()
    pricer = Pricer(prices, prices.price("aws:s3-standard", "us-east-1"), "aws")
    later = time.time() + 10 * 86400
    plan = plan_retention(take_inventory(location), location, read_policy(policy), pricer, InUse((), ()), later)
    assert len(plan.actions) == 4
    victim = plan.actions[2].entry.path

    def someone_else_deletes(number: int, action: PlannedAction) -> None:
        if number == 1:
            client.delete_object(Bucket="storage-vanish", Key=victim.split("/", 3)[3])

    with Ledger.open(str(tmp_path / "l.sqlite")) as ledger:
        result = apply_plan(plan, location, ledger, None, someone_else_deletes)
        rows = ledger.storage_actions(result.apply_id or 0)
    assert [(row.path == victim, row.outcome) for row in rows] == [
        (False, "done"), (False, "done"), (True, "vanished"), (False, "done")
    ]  # fmt: skip
    assert client.list_objects_v2(Bucket="storage-vanish", Prefix=prefix).get("Contents", []) == []


def test_a_gcs_prefix_is_audited_priced_by_its_classes_archived_and_pruned(
    gcs_server: GcsServer, tmp_path: Path, json_schema: Check
) -> None:
    """``gs://`` on a real GCS emulator: GCS names an object's class and time unlike S3 (``storageClass``,
    ``updated``), prices are Google's (us-central1 by default), and an archive is a rewrite onto itself."""
    gcs_server.make_bucket("storage-gcs")
    fs = gcs_server.fs()
    prefix = f"storage-gcs/exp-{time.time_ns()}"
    first_written_s = time.time()
    for step, loss in ((1, 0.9), (2, 0.4), (3, 0.8)):
        manifest = {
            "format": "computewise.checkpoint/1", "step": step, "file": f"step-{step:08d}.pt", "sha256": "0" * 64,
            "size_bytes": 4096, "metric": loss, "higher_is_better": False, "saved_at_s": 0.0,
        }  # fmt: skip
        fs.pipe(f"{prefix}/ckpt/step-{step:08d}.pt", bytes([step]) * 4096)
        fs.pipe(f"{prefix}/ckpt/step-{step:08d}.json", json.dumps(manifest).encode())
    fs.pipe(f"{prefix}/data/a.parquet", bytes(range(256)) * 64)
    fs.pipe(f"{prefix}/logs/train.log", b"loss 0.4\n")
    url, env = f"gs://{prefix}", gcs_server.env

    audit = _json(cli("storage", "audit", url, "--json", env=env))
    json_schema(audit, "storage-audit")
    assert audit["files"] == 8
    assert {row["kind"]: row["files"] for row in audit["kinds"]} == {"checkpoint": 6, "dataset": 1, "log": 1}
    (standard,) = audit["classes"]
    assert standard["storage_class"] == "gcp:gcs-standard" and standard["usd_per_gib_month"] == 0.02
    assert audit["runs"][0]["best"] == "step-00000002" and audit["runs"][0]["newest"] == "step-00000003"
    ages_s = [row["oldest_days"] * 86400 for row in audit["kinds"]]
    assert all(0 < age_s < time.time() - first_written_s for age_s in ages_s), ages_s  # the objects' own times

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "keep_last: 1\narchive: {after_days: 30, to: gcp:gcs-coldline}\ndelete: {after_days: 180, kinds: [log]}\n"
    )
    later = (datetime.now(UTC) + timedelta(days=400)).strftime("%Y-%m-%d")  # the emulator sets every object's time
    args = ("storage", "apply", url, "--policy", str(policy), "--as-of", later, "--db", str(tmp_path / "l.sqlite"))
    done = _json(cli(*args, "--apply", "--json", env=env))
    json_schema(done, "storage-apply")
    assert {a["outcome"] for a in done["actions"]} == {"done"}
    assert done["usd_per_month_saved"] > 0

    fs.invalidate_cache()
    assert fs.info(f"{prefix}/ckpt/step-00000001.pt")["storageClass"] == "COLDLINE"
    assert fs.info(f"{prefix}/data/a.parquet")["storageClass"] == "COLDLINE"
    assert fs.cat(f"{prefix}/data/a.parquet") == bytes(range(256)) * 64  # the same bytes, in a colder class
    assert fs.info(f"{prefix}/ckpt/step-00000002.pt")["storageClass"] == "STANDARD"
    assert not fs.exists(f"{prefix}/logs/train.log")

    again = _json(cli("storage", "audit", url, "--json", env=env))
    assert {row["storage_class"] for row in again["classes"]} == {"gcp:gcs-standard", "gcp:gcs-coldline"}
    assert "nothing to do" in cli(*args, "--apply", env=env).stdout


def test_a_folder_without_files_is_audited_as_empty(tmp_path: Path) -> None:
    """An empty folder, and one holding only empty folders: the tables had no rows to size and crashed."""
    (tmp_path / "nested" / "deeper").mkdir(parents=True)
    for root in (tmp_path / "nested" / "deeper", tmp_path):
        for columns in ("80", ""):  # a terminal's width, and a bare pipe's natural widths
            done = cli("storage", "audit", str(root), env={"COLUMNS": columns})
            assert done.returncode == 0, done.stderr
            words = " ".join(done.stdout.split())  # the title folds at 80 columns
            assert "0 files, 0 B" in words and "no files" in words, done.stdout


def test_an_archive_folder_inside_the_tree_is_read_as_archived(tmp_path: Path) -> None:
    """``archive.folder`` inside the audited folder: audit, apply, audit again. The second audit knows no
    policy, yet prices the moved files at the archive's class, keeps one run, and finds no duplicates."""
    root = tmp_path / "project"
    for step, loss, age in ((1, 0.5, 400), (2, 0.3, 300), (3, 0.7, 200)):
        write_checkpoint(root / "runs" / "a", step, loss, age, size_bytes=2**20)
    write_file(root / "data" / "train.parquet", 2**20, 60)
    policy = tmp_path / "policy.yaml"
    policy.write_text("keep_last: 1\narchive: {after_days: 30, to: aws:s3-glacier-deep, folder: cold}\n")

    before = _json(cli("storage", "audit", str(root), "--json"))
    apply = ("storage", "apply", str(root), "--policy", str(policy), "--db", str(tmp_path / "l.sqlite"), "--json")
    done = _json(cli(*apply, "--apply"))
    moved = {a["path"] for a in done["actions"] if a["outcome"] == "done"}
    assert len(moved) == 3 and (root / "cold" / "aws:s3-glacier-deep" / "data" / "train.parquet").exists()

    after = _json(cli("storage", "audit", str(root), "--json"))
    assert (after["files"], after["size_bytes"]) == (before["files"], before["size_bytes"])
    classes = {row["storage_class"]: row["files"] for row in after["classes"]}
    assert classes == {"aws:ebs-gp3": 4, "aws:s3-glacier-deep": 3}
    assert after["usd_per_month"] < before["usd_per_month"]
    assert [(run["run"], run["checkpoints"]) for run in after["runs"]] == [("runs/a", 3)]
    assert after["duplicates"]["groups"] == 0
    assert _json(cli(*apply, "--apply"))["actions"] == []


def test_an_apply_prints_each_outcome_and_what_the_ledger_recorded(tmp_path: Path) -> None:
    """The table of a real apply: an outcome per file, then the ledger's record of the bytes and $/month saved."""
    root = tmp_path / "project"
    write_file(root / "logs" / "train.log", 5000, 365)
    write_file(root / "data" / "train.parquet", 2**20, 60)
    policy = tmp_path / "policy.yaml"
    policy.write_text("archive: {after_days: 30, to: aws:s3-glacier-deep}\ndelete: {after_days: 180}\n")
    db = tmp_path / "ledger.sqlite"

    done = cli("storage", "apply", str(root), "--policy", str(policy), "--db", str(db), "--apply")

    assert done.returncode == 0, done.stderr
    with Ledger.open(str(db)) as ledger:
        apply = ledger.storage_applies()[0]
        saved = sum(row.usd_per_month_saved for row in ledger.storage_actions(apply.id))
    text = " ".join(done.stdout.split())
    assert "outcome" in text and "dry run" not in text
    assert f"recorded as storage apply {apply.id} in the ledger: deleted" in text
    assert f"{format_usd(saved)}/month saved" in text, text


def _stored_bytes(root: Path) -> int:
    """What ``du -b`` counts under ``root``: each file's size once per inode, however many names it has."""
    inodes = {(p.stat().st_dev, p.stat().st_ino): p.stat().st_size for p in root.rglob("*") if p.is_file()}
    return sum(inodes.values())


def _hard_linked_project(tmp_path: Path) -> Path:
    """A dataset with a second hard link, a true copy of another file, and a log; all a year old."""
    root = tmp_path / "project"
    train = write_file(root / "data" / "train.parquet", 700_000, 365)
    os.link(train, root / "data" / "hardlink.parquet")
    other = write_file(root / "data" / "other.parquet", 300_000, 365)
    write_file(root / "data" / "copy.parquet", 0, 365, other.read_bytes())
    write_file(root / "logs" / "train.log", 5_006, 365)
    return root


def test_a_hard_link_counts_once_and_is_no_duplicate(tmp_path: Path) -> None:
    root = _hard_linked_project(tmp_path)
    audit = _json(cli("storage", "audit", str(root), "--json"))
    assert audit["files"] == 5 and audit["size_bytes"] == _stored_bytes(root) == 1_305_006
    assert sum(row["size_bytes"] for row in audit["kinds"]) == audit["size_bytes"]
    assert sum(row["size_bytes"] for row in audit["classes"]) == audit["size_bytes"]
    duplicates = audit["duplicates"]
    assert duplicates["groups"] == 1 and duplicates["wasted_bytes"] == 300_000  # the copy, never the link
    assert {Path(path).name for path in duplicates["top"][0]["paths"]} == {"other.parquet", "copy.parquet"}


def test_an_apply_records_the_bytes_deleting_hard_links_really_freed(tmp_path: Path) -> None:
    root = _hard_linked_project(tmp_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text("delete: {after_days: 30, kinds: [dataset, log]}\n")
    db = tmp_path / "ledger.sqlite"
    args = ("storage", "apply", str(root), "--policy", str(policy), "--db", str(db), "--json")

    (root / "data" / "train.parquet.keep").touch()  # one link kept: deleting the other frees nothing
    plan = _json(cli(*args))
    assert plan["totals"]["delete"]["size_bytes"] == 300_000 * 2 + 5_006
    link = next(a for a in plan["actions"] if a["relative"] == "data/hardlink.parquet")
    assert link["size_bytes"] == 700_000 and link["usd_per_month_saved"] == 0.0 and "hard link" in link["reason"]

    (root / "data" / "train.parquet.keep").unlink()
    before = _stored_bytes(root)
    done = _json(cli(*args, "--apply"))
    assert {a["outcome"] for a in done["actions"]} == {"done"} and not any(root.rglob("*.parquet"))
    freed = before - _stored_bytes(root)
    assert freed == 1_305_006 and done["done"]["delete"]["size_bytes"] == freed
    storage = _json(cli("cost", "report", "--db", str(db), "--json"))["storage"]
    assert storage["deleted_files"] == 5 and storage["deleted_bytes"] == freed


def test_as_of_is_a_moment_to_come(tmp_path: Path) -> None:
    root = tmp_path / "project"
    write_file(root / "logs" / "train.log", 5000, 10)
    now = _json(cli("storage", "audit", str(root), "--json"))["kinds"][0]["oldest_days"]
    later = _json(cli("storage", "audit", str(root), "--as-of", "30d", "--json"))["kinds"][0]["oldest_days"]
    assert abs(now - 10) < 0.01 and abs(later - 40) < 0.01  # 30d is thirty days ahead, not ago
    today = datetime.now(UTC).strftime("%Y-%m-%d")  # today's date means now
    assert (
        abs(_json(cli("storage", "audit", str(root), "--as-of", today, "--json"))["kinds"][0]["oldest_days"] - 10)
        < 0.01
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text("delete: {after_days: 30}\n")
    for bad, says in (("1999-01-01", "in the past"), ("1e30d", "more than 100 years"), ("9999-06-01", "9998-12-31")):
        for verb in (("audit", str(root)), ("apply", str(root), "--policy", str(policy))):
            done = cli("storage", *verb, "--as-of", bad)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert says in done.stderr and "To fix:" in done.stderr, done.stderr
    assert "earlier dates are refused" in " ".join(cli("storage", "audit", "--help").stdout.split())
