"""The one assembly of a watched run (``monitor.watch``): priced row, sampler + writer, periodic chores."""

from __future__ import annotations

import io
import subprocess
import threading
from collections.abc import Callable, Sequence

from computewise.catalog import Catalog
from computewise.estimate.quote import PriceRequest
from computewise.ledger import GpuSampleRow, Ledger, NewRun, SampleRow
from computewise.monitor.gpu import NvmlGpuSource
from computewise.monitor.pricing import DetectedHardware
from computewise.monitor.recorded import RecordedRun
from computewise.monitor.watch import Periodic, Watch, priced_row

Spawn = Callable[..., subprocess.Popen[bytes]]
WaitFor = Callable[..., None]
ONE_H100 = DetectedHardware(gpu_count=1, gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_total_bytes=80e9, logical_cpus=8)


def test_a_price_the_user_gave_is_frozen_silently_and_the_gpu_named_by_its_catalog_slug(catalog: Catalog) -> None:
    said = io.StringIO()
    row = priced_row(
        catalog,
        "command",
        ("python", "train.py"),
        ONE_H100,
        PriceRequest(hourly_usd=2.5),
        tags={"team": "nlp"},
        interval_s=1.0,
        stream=said,
    )
    assert (row.price.hourly_usd, row.price.assumed) == (2.5, False)
    assert (row.kind, row.command, row.tags, row.gpu_count) == ("command", "python train.py", {"team": "nlp"}, 1)
    assert row.accelerator is not None and row.accelerator.startswith("h100")
    assert said.getvalue() == ""


def test_a_price_computewise_chose_is_said_at_launch_with_how_to_give_it(catalog: Catalog) -> None:
    said = io.StringIO()
    cpu_only = DetectedHardware(gpu_count=0, gpu_name=None, gpu_memory_total_bytes=None, logical_cpus=4)
    row = priced_row(
        catalog, "serve", "computewise serve echo", cpu_only, PriceRequest(), tags={}, interval_s=5.0, stream=said
    )
    assert row.price.assumed and row.price.hourly_usd > 0 and row.accelerator is None
    assert said.getvalue() == f"computewise: price {row.price.explanation}\n"
    assert "--hourly-usd" in said.getvalue()


def test_a_watch_writes_every_sample_of_a_child_it_took_and_a_last_one_at_stop(
    sqlite_ledger: Ledger, new_run: Callable[..., NewRun], catalog: Catalog, spawn_python: Spawn, wait_for: WaitFor
) -> None:
    child = spawn_python("import time\ntime.sleep(60)")
    seen: list[SampleRow] = []
    errors: list[Exception] = []

    def collect(row: SampleRow, gpu_rows: Sequence[GpuSampleRow]) -> None:
        seen.append(row)

    run = RecordedRun(sqlite_ledger, new_run())
    run.start()
    no_gpu = NvmlGpuSource(visible=())
    watch = Watch(run, child.pid, no_gpu, catalog, 0.05, flush_s=0.2, on_error=errors.append, sinks=[collect]).start()
    wait_for(lambda: len(seen) >= 3, "3 samples")
    watch.stop()
    written = sqlite_ledger.samples(run.run_id)
    assert len(written) == len(seen) >= 4  # the ticks and the last sample taken by stop()
    assert [row.t_s for row in written] == sorted(row.t_s for row in seen) and errors == []


def test_a_periodic_chore_repeats_until_stopped_and_never_after() -> None:
    calls: list[int] = []
    third = threading.Event()

    def chore() -> None:
        calls.append(len(calls))
        if len(calls) >= 3:
            third.set()

    periodic = Periodic(chore, 0.01, "test-chore").start()
    assert third.wait(30.0)
    periodic.stop()
    done = len(calls)
    Periodic(chore, 0.01, "never-started").stop()  # stopping one never started is harmless
    assert done >= 3 and len(calls) == done
