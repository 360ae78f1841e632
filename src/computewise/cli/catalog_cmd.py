"""``computewise catalog list|show|validate``: browse the hardware, price and carbon data and check user files.

Errors are ComputewiseError subclasses raised, not caught: ``cli.app.main`` turns them into a
message and exit code 2. The catalog itself is imported inside the commands so that
``computewise --help`` does not pay for reading it.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from computewise.cli.common import emit_json
from computewise.units import format_bytes, format_usd_or, plural

if TYPE_CHECKING:
    from computewise.catalog import Catalog, Row, TableName
    from computewise.report.rows import Grid
    from computewise.specs.hardware import Accelerator

app = typer.Typer(
    help=(
        "Browse and validate the hardware, price and carbon catalog. Add or override rows with files named "
        "accelerators*.csv, offerings*.csv, carbon*.csv, onprem*.csv or assumptions*.csv in "
        "$COMPUTEWISE_CATALOG_DIR (default: the 'catalog' folder of your computewise config dir) or via --catalog."
    ),
    no_args_is_help=True,
)

_stdout = Console(highlight=False, markup=False, emoji=False)  # catalog text may come from the user's own files

CatalogPaths = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog",
        help="Extra catalog CSV file or directory (repeatable); its rows override bundled and user rows.",
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")]


def _load(paths: list[Path] | None) -> Catalog:
    from computewise.catalog import load_catalog

    return load_catalog(tuple(paths or ()))


def _age_line(catalog: Catalog, table: TableName | None) -> str:
    oldest = catalog.oldest_retrieved(table)
    days = (date.today() - oldest).days
    return f"retrieved {oldest.isoformat()}, {days} days ago (oldest row)"


# ------------------------------------------------------------------------------ list


def _print_titled(title: str, grid: Grid) -> None:
    """A bold title over the table, printed as every table of the CLI is (numbers whole, text folded)."""
    from rich.text import Text

    from computewise.report.table import print_table

    _stdout.print(Text(title, style="bold"))
    print_table(grid, _stdout)


def _render(catalog: Catalog, rows: tuple[Row, ...], table_name: TableName) -> tuple[str, Grid]:
    from computewise.report.catalog import (
        accelerator_grid,
        assumption_grid,
        carbon_grid,
        fabric_grid,
        kernel_profile_grid,
        offering_grid,
        onprem_grid,
    )
    from computewise.specs.hardware import (
        Accelerator,
        Assumption,
        CarbonIntensity,
        KernelProfile,
        NetworkFabric,
        Offering,
        OnPremCost,
    )

    if table_name == "accelerators":
        return "accelerators", accelerator_grid(tuple(r for r in rows if isinstance(r, Accelerator)))
    if table_name == "offerings":
        return "offerings", offering_grid(tuple(r for r in rows if isinstance(r, Offering)))
    if table_name == "carbon":
        return "carbon", carbon_grid(tuple(r for r in rows if isinstance(r, CarbonIntensity)))
    if table_name == "onprem":
        return onprem_grid(catalog, tuple(r for r in rows if isinstance(r, OnPremCost)))
    if table_name == "fabrics":
        return "fabrics (inter-node networks)", fabric_grid(tuple(r for r in rows if isinstance(r, NetworkFabric)))
    if table_name == "kernel_profiles":
        title = "kernel profiles (burst shares of the data sheet)"
        return title, kernel_profile_grid(tuple(r for r in rows if isinstance(r, KernelProfile)))
    return "assumptions", assumption_grid(tuple(r for r in rows if isinstance(r, Assumption)))


def _rows_in_cloud(catalog: Catalog, table_name: TableName, cloud: str) -> tuple[Row, ...]:
    """Offerings in the cloud, accelerators it rents, or its carbon rows (with the world fallback)."""
    from computewise.errors import InputError, UnknownNameError

    wanted = cloud.strip().lower()
    known = {*catalog.clouds(), *(row.cloud for row in catalog.carbon if row.cloud != "*")}
    if wanted not in known:
        raise UnknownNameError("cloud", cloud, known)
    if table_name == "offerings":
        return tuple(row for row in catalog.offerings if row.cloud == wanted)
    if table_name == "accelerators":
        offered = {row.accelerator for row in catalog.offerings if row.cloud == wanted}
        return tuple(row for row in catalog.accelerators if row.slug in offered)
    if table_name == "carbon":
        return tuple(row for row in catalog.carbon if row.cloud in (wanted, "*"))
    raise InputError(f"--cloud does not apply to the {table_name} table", "drop --cloud, or list offerings")


@app.command("list")
def list_table(
    table: Annotated[
        str, typer.Argument(help="accelerators, offerings, carbon, onprem, assumptions, fabrics or kernel_profiles.")
    ] = "accelerators",
    cloud: Annotated[
        str | None, typer.Option("--cloud", help="Only this cloud (accelerators, offerings and carbon).")
    ] = None,
    as_json: JsonFlag = False,
    catalog_paths: CatalogPaths = None,
) -> None:
    """List one table of the catalog, with how old its data is."""
    from computewise.catalog import TABLES
    from computewise.errors import UnknownNameError

    name = table.strip().lower()
    if name not in TABLES:
        raise UnknownNameError("catalog table", table, TABLES)
    table_name: TableName = next(t for t in TABLES if t == name)
    catalog = _load(catalog_paths)
    rows = catalog.rows(table_name) if cloud is None else _rows_in_cloud(catalog, table_name, cloud)
    if as_json:
        from computewise.catalog.listing import CatalogListing

        emit_json(CatalogListing.of(catalog, table_name, rows).to_dict())
        return
    _print_titled(*_render(catalog, rows, table_name))
    _stdout.print(f"{plural(len(rows), 'row')}; {table_name} {_age_line(catalog, table_name)}")


# ------------------------------------------------------------------------------ show


def _show_accelerator(catalog: Catalog, acc: Accelerator, as_json: bool) -> None:
    from computewise.catalog.listing import AcceleratorSheet

    sheet = AcceleratorSheet.of(catalog, acc)
    if as_json:
        emit_json(sheet.to_dict())
        return
    from rich.text import Text

    from computewise.report.catalog import offering_grid, onprem_grid, si
    from computewise.report.terminal import print_pairs

    specs = [
        ("vendor / kind", f"{acc.vendor} / {acc.kind} ({acc.form_factor or 'n/a'})"),
        ("aliases", ", ".join(acc.aliases) or "-"),
        ("memory", f"{format_bytes(acc.memory_bytes)} at {si(acc.memory_bandwidth_bytes_per_s, 'B/s')}"),
        *(
            (f"{dtype} peak (dense)", si(flops, "OP/s" if dtype == "int8" else "FLOP/s"))
            for dtype, flops in acc.peak_flops.items()
        ),
        ("TDP", f"{acc.tdp_w:.0f} W" if acc.tdp_w else "not published"),
        (
            "interconnect",
            si(acc.interconnect_bytes_per_s, "B/s") + " per direction" if acc.interconnect_bytes_per_s else "none",
        ),
        ("source", acc.source),
        ("retrieved", f"{acc.retrieved} ({catalog.origin(acc)})"),
    ]
    _stdout.print(Text(f"{acc.name} ({acc.slug})", style="bold"))
    print_pairs(specs, _stdout)
    if sheet.offerings:
        _stdout.print()
        _print_titled(f"offerings with {acc.slug}", offering_grid(tuple(entry.row for entry in sheet.offerings)))
        for pricing, cheapest in sheet.cheapest_usd_per_accelerator_h.items():
            if cheapest is not None:
                _stdout.print(
                    f"cheapest {pricing}: {format_usd_or(cheapest.usd_per_h)} per {acc.slug}-hour "
                    f"({cheapest.cloud} {cheapest.instance_type}, {cheapest.region})"
                )
        _stdout.print(f"offerings {_age_line(catalog, 'offerings')}")
    else:
        _stdout.print(f"no cloud offering in the catalog rents {acc.slug}")
    if sheet.onprem:
        _stdout.print()
        _print_titled(*onprem_grid(catalog, tuple(entry.row for entry in sheet.onprem)))


def _show_instance(catalog: Catalog, name: str, as_json: bool) -> None:
    from computewise.report.catalog import offering_grid, si

    offerings = catalog.instance_offerings(name)
    if as_json:
        from computewise.catalog.listing import InstanceSheet

        emit_json(InstanceSheet.of(catalog, offerings).to_dict())
        return
    _print_titled(offerings[0].instance_type, offering_grid(offerings))
    first = offerings[0]
    _stdout.print(
        f"{first.vcpus} vCPUs, {si(first.ram_bytes, 'B')} RAM, network {si(first.network_bytes_per_s, 'B/s')}"
        if first.network_bytes_per_s
        else f"{first.vcpus} vCPUs, {si(first.ram_bytes, 'B')} RAM, network not published"
    )
    oldest = min(date.fromisoformat(o.retrieved) for o in offerings)
    _stdout.print(f"source: {first.source}\nretrieved {oldest.isoformat()}, {(date.today() - oldest).days} days ago")


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="Accelerator slug or alias (h100, a100, tpu-v5e) or instance type.")],
    as_json: JsonFlag = False,
    catalog_paths: CatalogPaths = None,
) -> None:
    """Show one accelerator (specs, offerings, cheapest $/accelerator-hour) or one instance type."""
    from computewise.errors import UnknownNameError

    catalog = _load(catalog_paths)
    wanted = name.strip().lower()
    if wanted in catalog.accelerator_names():
        _show_accelerator(catalog, catalog.accelerator(wanted), as_json)
        return
    if any(o.instance_type.lower() == wanted for o in catalog.offerings):
        _show_instance(catalog, wanted, as_json)
        return
    raise UnknownNameError(
        "accelerator or instance type",
        name,
        (*catalog.accelerator_names(), *(o.instance_type.lower() for o in catalog.offerings)),
        "run `computewise catalog list accelerators` or `computewise catalog list offerings`",
    )


# ------------------------------------------------------------------------------ validate


@app.command("validate")
def validate(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Catalog CSV files or directories to check with the bundled and user files."),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print one JSON object: valid, errors (file, line, column, message, hint) and counts."
        ),
    ] = False,
) -> None:
    """Check the bundled, user and given catalog files; exit 2 naming the file, line and column of a bad cell."""
    from rich.text import Text

    from computewise.catalog.validation import CatalogCounts, CatalogValidation
    from computewise.cli.common import print_error
    from computewise.errors import ComputewiseError
    from computewise.report.catalog import files_grid

    if as_json:
        try:
            catalog = _load(paths)
        except ComputewiseError as error:
            # Scripts read the JSON; a person still sees the error on stderr; the exit code is a user error's.
            emit_json(CatalogValidation.failed(error).to_dict())
            print_error(error)
            raise typer.Exit(2) from None
        emit_json(CatalogValidation.of(catalog).to_dict())
        return
    catalog = _load(paths)
    rows = tuple(
        (file.path + (" (bundled)" if file.bundled else ""), file.table, str(file.rows)) for file in catalog.files
    )
    _print_titled("catalog files", files_grid(rows))
    counts = CatalogCounts.of(catalog)
    _stdout.print(
        Text(f"OK: {plural(counts.files, 'file')}, {plural(counts.rows, 'row')}; data {_age_line(catalog, None)}")
    )
