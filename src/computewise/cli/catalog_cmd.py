"""``computewise catalog list|show|validate``: browse the hardware, price and carbon data and check user files.

Errors are ComputewiseError subclasses raised, not caught: ``cli.app.main`` turns them into a
message and exit code 2. The catalog itself is imported inside the commands so that
``computewise --help`` does not pay for reading it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from computewise.catalog import Catalog, Row, TableName
    from computewise.specs.hardware import (
        Accelerator,
        Assumption,
        CarbonIntensity,
        NetworkFabric,
        Offering,
        OnPremCost,
        Pricing,
    )

app = typer.Typer(
    help=(
        "Browse and validate the hardware, price and carbon catalog. Add or override rows with files named "
        "accelerators*.csv, offerings*.csv, carbon*.csv, onprem*.csv or assumptions*.csv in "
        "$COMPUTEWISE_CATALOG_DIR (default: the 'catalog' folder of your computewise config dir) or via --catalog."
    ),
    no_args_is_help=True,
)

_stdout = Console(highlight=False)

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


def _print_json(payload: Any) -> None:
    # Plain stdout, not Rich: Rich wraps long lines and would break the JSON for a parser.
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def _row_json(catalog: Catalog, row: Row) -> dict[str, Any]:
    data = asdict(row)
    data["origin"] = str(catalog.origin(row))
    return data


def _usd(value: float | None) -> str:
    from computewise.units import format_usd

    return "-" if value is None else format_usd(value)


def _si(value: float, unit: str) -> str:
    """Decimal prefixes, as vendors quote peaks and bandwidth (989.5 TFLOP/s, 3.35 TB/s)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


# ------------------------------------------------------------------------------ list


def _accelerator_table(rows: tuple[Accelerator, ...]) -> Table:
    table = Table(title="accelerators")
    for column in ("slug", "kind", "memory", "bandwidth", "bf16 peak", "fp8 peak", "TDP", "aliases"):
        table.add_column(column, justify="right" if column not in ("slug", "kind", "aliases") else "left")
    for acc in rows:
        table.add_row(
            acc.slug,
            acc.kind,
            _si(acc.memory_bytes, "B"),
            _si(acc.memory_bandwidth_bytes_per_s, "B/s"),
            _si(acc.peak_flops_for("bf16"), "FLOP/s"),
            _si(acc.peak_flops["fp8"], "FLOP/s") if "fp8" in acc.peak_flops else "-",
            f"{acc.tdp_w:.0f} W" if acc.tdp_w else "n/p",
            ", ".join(acc.aliases),
        )
    return table


def _offering_table(rows: tuple[Offering, ...], title: str = "offerings") -> Table:
    from computewise.catalog import usd_per_accelerator_h

    table = Table(title=title)
    for column in (
        "cloud",
        "instance type",
        "accelerator",
        "region",
        "on-demand/h",
        "spot/h",
        "1y/h",
        "3y/h",
        "per accel-h",
    ):
        table.add_column(column, justify="right" if column.endswith("h") else "left")
    for row in rows:
        table.add_row(
            row.cloud,
            row.instance_type,
            f"{row.accelerator_count}x {row.accelerator}",
            row.region,
            _usd(row.on_demand_usd_per_h),
            _usd(row.spot_usd_per_h),
            _usd(row.reserved_1y_usd_per_h),
            _usd(row.reserved_3y_usd_per_h),
            _usd(usd_per_accelerator_h(row)),
        )
    return table


def _carbon_table(rows: tuple[CarbonIntensity, ...]) -> Table:
    table = Table(title="carbon")
    for column in ("cloud", "region", "gCO2/kWh", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row.cloud, row.region, f"{row.g_co2_per_kwh:.0f}", row.source)
    return table


def _onprem_table(catalog: Catalog, rows: tuple[OnPremCost, ...]) -> Table:
    """Owned servers, with the hourly cost per accelerator at the catalog's power price, PUE and utilization."""
    power_usd_per_kwh = catalog.assumption("onprem_power_usd_per_kwh")
    pue = catalog.assumption("onprem_pue")
    utilization = catalog.assumption("onprem_utilization")
    table = Table(
        title=f"onprem (per accel-h at {utilization:.0%} utilization, PUE {pue:g}, ${power_usd_per_kwh:g}/kWh)"
    )
    for column in ("accelerator", "count", "purchase", "life", "power", "ops/yr", "per accel-h"):
        table.add_column(column, justify="left" if column == "accelerator" else "right")
    for row in rows:
        per_h = row.usd_per_h(power_usd_per_kwh, pue, utilization) / row.accelerator_count
        table.add_row(
            row.accelerator,
            str(row.accelerator_count),
            _usd(row.purchase_usd),
            f"{row.lifetime_years:g} y",
            f"{row.server_power_w / 1000:.1f} kW",
            _usd(row.ops_usd_per_year),
            _usd(per_h),
        )
    return table


def _assumption_table(rows: tuple[Assumption, ...]) -> Table:
    table = Table(title="assumptions")
    for column in ("key", "value", "unit", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row.key, f"{row.value:g}", row.unit, row.source)
    return table


def _fabric_table(rows: tuple[NetworkFabric, ...]) -> Table:
    table = Table(title="fabrics (inter-node networks)")
    for column in ("fabric", "name", "efficiency", "latency", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row.fabric, row.name, f"{row.network_efficiency:g}", f"{row.latency_s * 1e6:g} us", row.source)
    return table


def _render(catalog: Catalog, rows: tuple[Row, ...], table_name: TableName) -> Table:
    from computewise.specs.hardware import Accelerator, Assumption, CarbonIntensity, NetworkFabric, Offering, OnPremCost

    if table_name == "accelerators":
        return _accelerator_table(tuple(r for r in rows if isinstance(r, Accelerator)))
    if table_name == "offerings":
        return _offering_table(tuple(r for r in rows if isinstance(r, Offering)))
    if table_name == "carbon":
        return _carbon_table(tuple(r for r in rows if isinstance(r, CarbonIntensity)))
    if table_name == "onprem":
        return _onprem_table(catalog, tuple(r for r in rows if isinstance(r, OnPremCost)))
    if table_name == "fabrics":
        return _fabric_table(tuple(r for r in rows if isinstance(r, NetworkFabric)))
    return _assumption_table(tuple(r for r in rows if isinstance(r, Assumption)))


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
        str, typer.Argument(help="accelerators, offerings, carbon, onprem, assumptions or fabrics.")
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
        _print_json(
            {
                "table": table_name,
                "oldest_retrieved": catalog.oldest_retrieved(table_name).isoformat(),
                "age_days": catalog.age_days(table_name),
                "rows": [_row_json(catalog, row) for row in rows],
            }
        )
        return
    _stdout.print(_render(catalog, rows, table_name))
    _stdout.print(f"{len(rows)} rows; {table_name} {_age_line(catalog, table_name)}")


# ------------------------------------------------------------------------------ show


def _show_accelerator(catalog: Catalog, acc: Accelerator, as_json: bool) -> None:
    from computewise.catalog import usd_per_accelerator_h

    offerings = tuple(sorted(catalog.offerings_for(acc.slug), key=lambda o: usd_per_accelerator_h(o) or 0.0))
    pricings: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")
    cheapest = {pricing: catalog.cheapest_offering(acc.slug, pricing) for pricing in pricings}
    onprem = catalog.onprem_options(acc.slug)
    if as_json:
        _print_json(
            {
                "accelerator": _row_json(catalog, acc),
                "offerings": [_row_json(catalog, o) for o in offerings],
                "cheapest_usd_per_accelerator_h": {
                    pricing: None
                    if offering is None
                    else {
                        "usd_per_h": usd_per_accelerator_h(offering, pricing),
                        "cloud": offering.cloud,
                        "instance_type": offering.instance_type,
                        "region": offering.region,
                    }
                    for pricing, offering in cheapest.items()
                },
                "onprem": [_row_json(catalog, row) for row in onprem],
            }
        )
        return
    specs = Table(title=f"{acc.name} ({acc.slug})", show_header=False)
    specs.add_column("field")
    specs.add_column("value", overflow="fold")
    specs.add_row("vendor / kind", f"{acc.vendor} / {acc.kind} ({acc.form_factor or 'n/a'})")
    specs.add_row("aliases", ", ".join(acc.aliases) or "-")
    specs.add_row("memory", f"{_si(acc.memory_bytes, 'B')} at {_si(acc.memory_bandwidth_bytes_per_s, 'B/s')}")
    for dtype, flops in acc.peak_flops.items():
        specs.add_row(f"{dtype} peak (dense)", _si(flops, "OP/s" if dtype == "int8" else "FLOP/s"))
    specs.add_row("TDP", f"{acc.tdp_w:.0f} W" if acc.tdp_w else "not published")
    specs.add_row(
        "interconnect",
        _si(acc.interconnect_bytes_per_s, "B/s") + " per direction" if acc.interconnect_bytes_per_s else "none",
    )
    specs.add_row("source", acc.source)
    specs.add_row("retrieved", f"{acc.retrieved} ({catalog.origin(acc)})")
    _stdout.print(specs)
    if offerings:
        _stdout.print(_offering_table(offerings, title=f"offerings with {acc.slug}"))
        for pricing, offering in cheapest.items():
            if offering is not None:
                _stdout.print(
                    f"cheapest {pricing}: {_usd(usd_per_accelerator_h(offering, pricing))} per {acc.slug}-hour "
                    f"({offering.cloud} {offering.instance_type}, {offering.region})"
                )
        _stdout.print(f"offerings {_age_line(catalog, 'offerings')}")
    else:
        _stdout.print(f"no cloud offering in the catalog rents {acc.slug}")
    if onprem:
        _stdout.print(_onprem_table(catalog, onprem))


def _show_instance(catalog: Catalog, name: str, as_json: bool) -> None:
    offerings = catalog.instance_offerings(name)
    if as_json:
        _print_json(
            {"instance_type": offerings[0].instance_type, "offerings": [_row_json(catalog, o) for o in offerings]}
        )
        return
    _stdout.print(_offering_table(offerings, title=offerings[0].instance_type))
    first = offerings[0]
    _stdout.print(
        f"{first.vcpus} vCPUs, {_si(first.ram_bytes, 'B')} RAM, network {_si(first.network_bytes_per_s, 'B/s')}"
        if first.network_bytes_per_s
        else f"{first.vcpus} vCPUs, {_si(first.ram_bytes, 'B')} RAM, network not published"
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
) -> None:
    """Check the bundled, user and given catalog files; exit 2 naming the file, line and column of a bad cell."""
    catalog = _load(paths)
    table = Table(title="catalog files")
    table.add_column("file", overflow="fold")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for file in catalog.files:
        table.add_row(file.path + (" (bundled)" if file.bundled else ""), file.table, str(file.rows))
    _stdout.print(table)
    _stdout.print(
        f"OK: {len(catalog.files)} files, {sum(f.rows for f in catalog.files)} rows; data {_age_line(catalog, None)}"
    )
