"""``computewise bench``: measure this machine, compare it with the data sheet, optionally calibrate with it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from computewise.cli.common import CatalogOption, HtmlOption, JsonOption, emit, progress_callback
from computewise.system.files import check_writable

if TYPE_CHECKING:
    from computewise.bench.result import BenchResult


def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="Fewer sizes and repeats: under a minute on a 2-core CPU.")
    ] = False,
    as_json: JsonOption = False,
    html: HtmlOption = None,
    save: Annotated[
        bool,
        typer.Option(
            "--save",
            help="Write the figures as a calibration into the user catalog; estimate, plan, tune and run then use it.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="With --save: save even when the spread of the repeats says the machine was busy."
        ),
    ] = False,
    storage: Annotated[
        Path | None,
        typer.Option("--storage", help="Also measure sequential and random reads of a file in this directory."),
    ] = None,
    device: Annotated[
        str, typer.Option("--device", help="all (the CPU and every visible GPU), cpu, or cuda:N.")
    ] = "all",
    catalog_paths: CatalogOption = None,
) -> None:
    """Measure matmul TFLOP/s, memory and copy bandwidth, collectives, storage and a reference training step."""
    from computewise.bench import BenchOptions, run_bench
    from computewise.bench.suite import resolve_devices
    from computewise.errors import InputError
    from computewise.report.bench import bench_html, print_bench

    if force and not save:
        raise InputError("--force only changes what --save does", "add --save, or drop --force")
    if storage is not None and not storage.is_dir():
        raise InputError(f"--storage {storage}: not a directory", "pass a directory on the disk to measure")
    resolve_devices(device)  # a device that is not here fails before a minute of measuring
    if html is not None:
        check_writable(html, "--html", "nothing was measured")
    options = BenchOptions(quick=quick, device=device, storage=storage, catalog_paths=tuple(catalog_paths or ()))
    stderr = Console(stderr=True)
    with progress_callback("bench", stderr) as progress:
        result = run_bench(options, progress)
    emit(result, as_json, html, print_bench, bench_html)
    if save:
        _save(result, force, stderr)


def _save(result: BenchResult, force: bool, stderr: Console) -> None:
    """Write the calibration, unless its figures were measured on a busy machine and --force was not given.

    A calibration replaces the data sheet in every later estimate and plan, so figures disturbed by
    other work would mislead them all, silently; the measurement itself is still printed.
    """
    from computewise.bench.result import BUSY_SPREAD
    from computewise.catalog import user_catalog_dir
    from computewise.catalog.calibration import Calibration
    from computewise.catalog.calibration import save as save_calibration
    from computewise.errors import InputError

    busy = result.busy_figures()
    why = (
        f"the machine was busy: {len(busy)} figure(s) spread {BUSY_SPREAD:g}x or more between repeats "
        f"({'; '.join(busy[:3])}{'; ...' if len(busy) > 3 else ''})"
    )
    if busy and not force:
        raise InputError(
            f"calibration not saved: {why}",
            "rerun computewise bench --save on a quiet machine (nothing else running), or add --force to save anyway",
        )
    # The catalog reads the --json document, not the type: it sits below bench and never imports it.
    path = save_calibration(Calibration.from_bench_dict(result.to_dict()), user_catalog_dir())
    if busy:
        stderr.print(f"warning: saved although {why}", highlight=False, markup=False, emoji=False, soft_wrap=True)
    stderr.print(f"wrote the calibration {path}", highlight=False, markup=False, emoji=False, soft_wrap=True)
