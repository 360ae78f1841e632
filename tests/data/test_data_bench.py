"""``data bench`` on real files, an S3 server, an entry point and a child process; bad input exits 2.

Speeds are never asserted: the counts must agree with the rows written, the structure with the schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from data_files import Written

from computewise.data.bench import BenchOptions, run_data_bench
from computewise.data.demand import demand_from_rate
from computewise.data.result import DataBenchResult
from computewise.monitor.diagnosis import UsageStats, diagnose
from gcs_server import GcsServer
from s3_server import S3Server

CLI = [sys.executable, "-m", "computewise.cli.app"]


def quiet(_description: str, _done: int, _total: int) -> None:
    """Progress goes nowhere in tests."""


def bench(source: str, max_workers: int = 2, **options: object) -> DataBenchResult:
    return run_data_bench(BenchOptions(source=source, max_workers=max_workers, **options), None, quiet)  # type: ignore[arg-type]


def test_every_configuration_reads_every_row_of_a_csv(csv_file: Written, json_schema: Callable[..., None]) -> None:
    options = BenchOptions(str(csv_file.path), max_workers=2, batch_rows=2048)
    result = run_data_bench(options, demand_from_rate(1e9), quiet)
    assert [m.workers for m in result.measurements][:2] == [1, 2]
    for m in result.measurements:
        assert m.complete and m.samples == csv_file.rows
        assert m.read_bytes == csv_file.path.stat().st_size
        assert 0 < m.first_batch_s <= m.elapsed_s
    assert result.verdict is not None and result.verdict.input_bound  # nothing on a 2-core VM feeds 1e9/s
    assert "input-bound by" in result.verdict.text
    assert all(a.change and a.evidence for a in result.advice)  # which advice applies depends on speeds
    data = result.to_dict()
    json_schema(data, "data-bench")
    assert DataBenchResult.from_dict(json.loads(json.dumps(data))) == result


def test_the_columnar_comparison_reads_the_same_rows_both_ways(csv_file: Written) -> None:
    from computewise.data.convert import columnar_speedup
    from computewise.data.sources import open_source

    rows, text_s, parquet_s = columnar_speedup(open_source(str(csv_file.path)).parts, 256)
    assert rows == csv_file.rows  # the whole 3 MB file is under the 16 MB sample
    assert text_s > 0 and parquet_s > 0


def test_s3_parquet_through_a_real_s3_server(
    parquet_file: Written, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    s3_server.make_bucket("datasets")
    s3_server.client().upload_file(str(parquet_file.path), "datasets", "train/part-0.parquet")  # type: ignore[attr-defined]
    result = bench("s3://datasets/train/", max_workers=1, seconds_per_config=60)
    assert result.format == "parquet" and result.rows_known == parquet_file.rows
    assert all(m.samples == parquet_file.rows for m in result.measurements)


def test_an_entry_point_loader_is_measured_at_each_worker_count(make_module: Callable[[str, str], str]) -> None:
    make_module(
        "my_loaders",
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def make_loader(num_workers=0):
            data = TensorDataset(torch.arange(1000.0).reshape(500, 2), torch.zeros(500))
            return DataLoader(data, batch_size=64, num_workers=num_workers)

        def not_a_loader():
            return 42
        """,
    )
    result = bench("my_loaders:make_loader")
    assert [m.workers for m in result.measurements] == [1, 2]
    assert all(m.samples == 500 and m.read_bytes == 500 * 3 * 4 for m in result.measurements)
    assert result.bytes_kind == "in the batches' arrays"


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=180, cwd=cwd, env={**os.environ, **(env or {})}
    )


def test_gcs_parquet_through_a_real_gcs_emulator(parquet_file: Written, gcs_server: GcsServer) -> None:
    """``gs://`` through gcsfs, in a child process (gcsfs picks its file system class when first imported)."""
    gcs_server.make_bucket("datasets")
    gcs_server.fs().put_file(str(parquet_file.path), "datasets/train/part-0.parquet")
    done = cli("data", "bench", "gs://datasets/train/", "--max-workers", "1", "--json", env=gcs_server.env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["format"] == "parquet" and data["rows_known"] == parquet_file.rows
    assert data["measurements"] and {m["samples"] for m in data["measurements"]} == {parquet_file.rows}


def test_the_command_an_input_bound_diagnosis_suggests_runs(parquet_file: Written) -> None:
    """The link from `run`: the suggested line, SOURCE and MODEL filled in, is a working data bench command."""
    stats = UsageStats(
        gpu_count=8,
        logical_cpus=16,
        gpu_util_pct_mean=30.0,
        gpu_memory_share_peak=0.5,
        cpu_percent_mean=1500.0,
        host_cpu_percent_mean=90.0,
        disk_read_bytes_per_s=0.0,
        net_recv_bytes_per_s=0.0,
        data_wait_share=0.4,
        accelerator="h100-sxm",
    )
    findings = [f for f in diagnose(stats) if f.verdict.startswith("input-bound")]
    assert len(findings) == 2
    command = findings[0].advice.split("`")[1]
    assert command == "computewise data bench SOURCE --model MODEL --gpu h100-sxm --gpus 8"
    words = command.replace("SOURCE", str(parquet_file.path)).replace("MODEL", "gpt2").split()[1:]
    done = cli(*words, "--max-workers", "2", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["demand"]["gpus"] == 8 and data["demand"]["accelerator"] == "h100-sxm"
    assert {m["samples"] for m in data["measurements"]} == {parquet_file.rows}
    assert data["verdict"]["text"].startswith("the loader delivers")


def test_track_names_the_rate_its_steps_would_consume(tmp_path: Path) -> None:
    """A real track() loop that waits on its data: the suggested --demand is samples over compute time."""
    import re
    import time

    from computewise import track

    def slow_batches() -> Iterator[list[int]]:
        for _ in range(12):
            time.sleep(0.01)  # the loader is slow...
            yield list(range(8))

    with track(db=str(tmp_path / "ledger.sqlite")) as t:
        for _batch in t.loader(slow_batches()):
            end = time.perf_counter() + 0.004  # ...and the step is quick
            while time.perf_counter() < end:
                pass
    summary = t.summary()
    assert summary["diagnosis"].startswith("input-bound")
    found = re.search(r"computewise data bench SOURCE --demand ([0-9.e+]+)`", summary["diagnosis"])
    assert found is not None, summary["diagnosis"]
    assert float(found.group(1)) == pytest.approx(summary["samples"] / summary["compute_s"], rel=0.01)


@pytest.mark.parametrize(
    ("args", "files", "match"),
    [
        (("missing.parquet",), {}, "no such file"),
        (("notes.docx",), {"notes.docx": "hello"}, "unknown data format"),
        (("header.csv",), {"header.csv": "a,b\n"}, "no samples"),
        (("d.csv", "--model", "gpt2", "--gpu", "h100", "--gpus", "0"), {"d.csv": "a\n1\n"}, "--gpus"),
        (("bad_loader:make",), {"bad_loader.py": "def make():\n    return 42\n"}, "not an iterable"),
    ],
)
def test_bad_input_exits_2_with_a_fix(tmp_path: Path, args: tuple[str, ...], files: dict[str, str], match: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = cli("data", "bench", *args, "--max-workers", "1", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert match in done.stderr and "To fix:" in done.stderr
    assert "Traceback" not in done.stderr


def test_convert_writes_parquet_with_the_same_rows(
    csv_file: Written, tmp_path: Path, json_schema: Callable[..., None]
) -> None:
    from computewise.data.convert import convert

    target = tmp_path / "out" / "train.parquet"
    target.parent.mkdir()
    result = convert(str(csv_file.path), target)
    assert result.rows == csv_file.rows
    assert result.source_read_s > 0 and result.target_read_s > 0
    json_schema(result.to_dict(), "data-convert")
    import pyarrow.parquet as pq

    assert pq.ParquetFile(target).metadata.num_rows == csv_file.rows
    assert [p.name for p in target.parent.iterdir()] == ["train.parquet"]  # no temporary file left behind


def test_without_torch_the_plain_iterator_reads_everything(
    parquet_file: Written, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # find_spec reads a None entry as "not installed"
    result = bench(str(parquet_file.path))
    assert result.loader == "plain iterator"
    assert [(m.workers, m.samples) for m in result.measurements] == [(0, parquet_file.rows)]
    assert any("torch is not installed" in note for note in result.notes)


def test_a_plans_step_time_sets_the_demand(tmp_path: Path) -> None:
    from computewise.data.demand import demand_from_plan
    from computewise.errors import InputError

    args = ("plan", "train", "-m", "gpt2", "--tokens", "1B", "-g", "a10g", "--max-gpus", "8", "--top", "1", "--json")
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "plan.json"
    path.write_text(done.stdout)
    recommended = json.loads(done.stdout)["recommended"]
    demand = demand_from_plan(path, 512)
    assert demand.samples_per_s == pytest.approx(512 / recommended["time"]["step_seconds"])
    assert demand.gpus == recommended["gpus"]
    with pytest.raises(InputError, match="--global-batch"):
        demand_from_plan(path, None)


@pytest.mark.parametrize(
    ("source", "target", "match"),
    [("train.parquet", "out.parquet", "not a row format"), ("train.csv", "out.csv", "must be a .parquet file")],
)
def test_convert_refuses_what_it_cannot_do(tmp_path: Path, source: str, target: str, match: str) -> None:
    (tmp_path / "train.csv").write_text("a,b\n1,2\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1]}), tmp_path / "train.parquet")
    done = cli("data", "convert", source, target, cwd=tmp_path)
    assert done.returncode == 2 and match in done.stderr and "To fix:" in done.stderr
    assert not (tmp_path / target).exists()  # nothing half-written
