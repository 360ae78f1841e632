"""Read catalog CSV files into spec values, checking every cell on the way in.

Each table is described once (its columns, its key, how a row becomes a value), and the same
reader serves the bundled files, the user's directory and ``--catalog`` paths, so a user's row
is held to exactly the rules of a shipped one and a bad cell is reported the same way:
``path:line: column 'x': problem`` with the 1-based line of the file.

Rows are merged in reading order (bundled, then user directory, then explicit paths); a later
row with the same key replaces the earlier one, which is how a user corrects a price without
forking the package. References between tables (an offering's accelerator) are checked after
merging, because a user file may add the accelerator that its offerings rent.
"""

from __future__ import annotations

import csv
import difflib
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import ClassVar, Literal

from computewise.errors import CatalogError, InputError
from computewise.specs.codec import Jsonable, json_field
from computewise.specs.hardware import (
    DTYPES,
    Accelerator,
    Assumption,
    CarbonIntensity,
    Dtype,
    KernelProfile,
    NetworkFabric,
    Offering,
    OnPremCost,
)

__all__ = [
    "ACCELERATOR_KINDS",
    "ENV_CATALOG_DIR",
    "TABLES",
    "CatalogFile",
    "LoadedCatalog",
    "LoadedRow",
    "Row",
    "RowOrigin",
    "SourceFile",
    "TableName",
    "bundled_files",
    "discover_files",
    "load_files",
    "row_key",
    "table_for_filename",
    "user_catalog_dir",
]

TableName = Literal["accelerators", "offerings", "carbon", "onprem", "assumptions", "fabrics", "kernel_profiles"]
TABLES: tuple[TableName, ...] = (
    "accelerators", "offerings", "carbon", "onprem", "assumptions", "fabrics", "kernel_profiles"
)  # fmt: skip

AcceleratorKind = Literal["gpu", "tpu", "npu", "cpu", "edge"]
ACCELERATOR_KINDS: tuple[AcceleratorKind, ...] = ("gpu", "tpu", "npu", "cpu", "edge")

Row = Accelerator | Offering | CarbonIntensity | OnPremCost | Assumption | NetworkFabric | KernelProfile

ENV_CATALOG_DIR = "COMPUTEWISE_CATALOG_DIR"

# Slugs and aliases are typed on command lines: keep them to characters that need no quoting.
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_WILDCARD = "*"


@dataclass(frozen=True)
class RowOrigin:
    """Where a row was read, so a surprising number can be traced to its file and line."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class LoadedRow:
    table: TableName
    key: tuple[str, ...]
    value: Row
    origin: RowOrigin


@dataclass(frozen=True)
class CatalogFile(Jsonable):
    """One file that was read, with its row count (what ``catalog validate`` reports)."""

    json_description: ClassVar[str] = "One catalog file that was read, and the table its rows went to."

    path: str
    table: TableName
    rows: int = field(metadata=json_field(minimum=0))
    bundled: bool = field(metadata=json_field(description="Shipped with computewise (else a user's file)."))


@dataclass(frozen=True)
class SourceFile:
    """A file to read; its text is read only when the cache misses, so discovery costs a few ``stat`` calls."""

    path: str
    table: TableName
    bundled: bool

    def read_text(self) -> str:
        try:
            return Path(self.path).read_text(encoding="utf-8-sig")
        except OSError as error:
            raise InputError(
                f"cannot read catalog file {self.path}: {error.strerror or error}",
                "check the path and its permissions",
            ) from error
        except UnicodeDecodeError as error:
            raise CatalogError(
                self.path, 1, "*", f"not UTF-8 text ({error.reason})", "save the file as UTF-8 CSV"
            ) from error


@dataclass(frozen=True)
class LoadedCatalog:
    """Merged rows per table (later files win) plus the list of files read."""

    rows: Mapping[TableName, tuple[LoadedRow, ...]]
    files: tuple[CatalogFile, ...]


# ------------------------------------------------------------------------------ cell reading


class _Cells:
    """One CSV record with its file and line, turning each cell into a checked value or a CatalogError."""

    def __init__(self, path: str, line: int, cells: Mapping[str, str]) -> None:
        self.path = path
        self.line = line
        self.cells = cells

    def error(self, column: str, problem: str, hint: str | None = None) -> CatalogError:
        return CatalogError(self.path, self.line, column, problem, hint)

    def raw(self, column: str) -> str:
        return self.cells.get(column, "").strip()

    def text(self, column: str) -> str:
        value = self.raw(column)
        if not value:
            raise self.error(column, "is empty", f"fill in {column}; every row needs one")
        return value

    def name(self, column: str, *, wildcard: bool = False) -> str:
        value = self.text(column)
        if wildcard and value == _WILDCARD:
            return value
        if not _NAME_RE.match(value):
            suggestion = value.lower().replace(" ", "-")
            raise self.error(
                column,
                f"{value!r} is not a valid name",
                f"use lowercase letters, digits, '.', '-', '+' or '_', e.g. {suggestion!r}",
            )
        return value

    def number(self, column: str, *, positive: bool = False, default: float | None = None) -> float:
        text = self.raw(column)
        if not text and default is not None:
            return default
        if not text:
            raise self.error(column, "is empty", f"fill in {column} with a plain number like 8.0e10")
        try:
            value = float(text)
        except ValueError:
            raise self.error(
                column,
                f"expected a number, got {text!r}",
                f"write a plain number like 8.0e10 (the unit is in the column name: {column})",
            ) from None
        if not math.isfinite(value):
            raise self.error(column, f"must be a finite number, got {text!r}")
        if positive and value <= 0:
            raise self.error(column, f"must be greater than zero, got {text!r}")
        if value < 0:
            raise self.error(column, f"must not be negative, got {text!r}")
        return value

    def yes_no(self, column: str, default: bool) -> bool:
        text = self.raw(column).lower()
        if not text:
            return default
        if text not in ("yes", "no"):
            raise self.error(column, f"expected yes or no, got {text!r}")
        return text == "yes"

    def optional_price(self, column: str) -> float | None:
        """Empty means "not sold" (or no figure recorded); a price that is present must be positive."""
        if not self.raw(column):
            return None
        return self.number(column, positive=True)

    def whole(self, column: str) -> int:
        value = self.number(column, positive=True)
        if value != int(value):
            raise self.error(column, f"must be a whole number, got {self.raw(column)!r}")
        return int(value)

    def iso_date(self, column: str) -> str:
        text = self.text(column)
        try:
            if not _DATE_RE.match(text):
                raise ValueError(text)
            date.fromisoformat(text)
        except ValueError:
            raise self.error(column, f"expected an ISO date YYYY-MM-DD, got {text!r}", "e.g. 2025-06-01") from None
        return text


# ------------------------------------------------------------------------------ tables

_KIND_BY_NAME: dict[str, AcceleratorKind] = {kind: kind for kind in ACCELERATOR_KINDS}


def _accelerator(cells: _Cells) -> Accelerator:
    slug = cells.name("slug")
    kind = cells.text("kind").lower()
    if kind not in ACCELERATOR_KINDS:
        raise cells.error("kind", f"{kind!r} is not a known kind", f"use one of: {', '.join(ACCELERATOR_KINDS)}")
    aliases: list[str] = []
    for alias in cells.raw("aliases").split("|"):
        alias = alias.strip().lower()
        if not alias:
            continue
        if not _NAME_RE.match(alias):
            raise cells.error("aliases", f"alias {alias!r} is not a valid name", "separate aliases with '|'")
        if alias != slug and alias not in aliases:
            aliases.append(alias)
    peak: dict[Dtype, float] = {}
    for dtype in DTYPES:
        value = cells.number(f"{dtype}_flops", default=0.0)
        if value:
            peak[dtype] = value
    if not peak:
        raise cells.error("fp32_flops", "every *_flops cell is zero", "give at least one dense peak in FLOP/s")
    return Accelerator(
        slug=slug,
        name=cells.text("name"),
        vendor=cells.text("vendor"),
        kind=_KIND_BY_NAME[kind],
        memory_bytes=cells.number("memory_bytes", positive=True),
        memory_bandwidth_bytes_per_s=cells.number("memory_bandwidth_bytes_per_s", positive=True),
        peak_flops=peak,
        tdp_w=cells.number("tdp_w"),
        interconnect_bytes_per_s=cells.number("interconnect_bytes_per_s", default=0.0),
        form_factor=cells.raw("form_factor"),
        trains=cells.yes_no("trains", default=True),
        slice_sizes=_slice_sizes(cells),
        aliases=tuple(aliases),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
    )


def _slice_sizes(cells: _Cells) -> tuple[int, ...]:
    """``4|8|16``: ascending device counts; empty: any count."""
    parts = [part.strip() for part in cells.raw("slice_sizes").split("|") if part.strip()]
    if not all(part.isdigit() and int(part) > 0 for part in parts):
        raise cells.error(
            "slice_sizes", f"{cells.raw('slice_sizes')!r} is not a list of device counts", "write e.g. 1|4|8"
        )
    sizes = tuple(int(part) for part in parts)
    if list(sizes) != sorted(set(sizes)):
        raise cells.error("slice_sizes", "counts must be ascending without repeats", "write e.g. 1|4|8")
    return sizes


def _offering(cells: _Cells) -> Offering:
    return Offering(
        cloud=cells.name("cloud"),
        instance_type=cells.text("instance_type"),
        accelerator=cells.text("accelerator").lower(),
        accelerator_count=cells.whole("accelerator_count"),
        vcpus=cells.whole("vcpus"),
        ram_bytes=cells.number("ram_bytes", positive=True),
        network_bytes_per_s=cells.number("network_bytes_per_s"),
        region=cells.name("region"),
        on_demand_usd_per_h=cells.number("on_demand_usd_per_h", positive=True),
        spot_usd_per_h=cells.optional_price("spot_usd_per_h"),
        reserved_1y_usd_per_h=cells.optional_price("reserved_1y_usd_per_h"),
        reserved_3y_usd_per_h=cells.optional_price("reserved_3y_usd_per_h"),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
        fabric=cells.name("fabric") if cells.raw("fabric") else "",
    )


def _carbon(cells: _Cells) -> CarbonIntensity:
    return CarbonIntensity(
        cloud=cells.name("cloud", wildcard=True),
        region=cells.name("region", wildcard=True),
        g_co2_per_kwh=cells.number("g_co2_per_kwh"),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
    )


def _onprem(cells: _Cells) -> OnPremCost:
    return OnPremCost(
        accelerator=cells.text("accelerator").lower(),
        accelerator_count=cells.whole("accelerator_count"),
        purchase_usd=cells.number("purchase_usd", positive=True),
        lifetime_years=cells.number("lifetime_years", positive=True),
        server_power_w=cells.number("server_power_w", positive=True),
        ops_usd_per_year=cells.number("ops_usd_per_year"),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
    )


def _assumption(cells: _Cells) -> Assumption:
    key = cells.text("key")
    if not _KEY_RE.match(key):
        raise cells.error("key", f"{key!r} is not a snake_case key", "e.g. onprem_pue")
    return Assumption(
        key=key,
        value=cells.number("value"),
        unit=cells.text("unit"),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
    )


def _fabric(cells: _Cells) -> NetworkFabric:
    efficiency = cells.number("network_efficiency", positive=True)
    if efficiency > 1:
        raise cells.error(
            "network_efficiency", f"must be at most 1, got {cells.raw('network_efficiency')!r}", "e.g. 0.9"
        )
    return NetworkFabric(
        fabric=cells.name("fabric"),
        name=cells.text("name"),
        network_efficiency=efficiency,
        latency_s=cells.number("latency_s"),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
    )


def _share(cells: _Cells, column: str) -> float:
    """A fraction of a data-sheet figure, in (0, 1]."""
    share = cells.number(column, positive=True)
    if share > 1:
        raise cells.error(
            column, f"must be at most 1, got {cells.raw(column)!r}", "a share of the data sheet, e.g. 0.8"
        )
    return share


def _kernel_profile(cells: _Cells) -> KernelProfile:
    def optional(column: str) -> float | None:  # an empty cell: the catalog's assumption applies
        return _share(cells, column) if cells.raw(column) else None

    return KernelProfile(
        accelerator=cells.text("accelerator").lower(),
        matmul_share=_share(cells, "matmul_share"),
        fp32_matmul_share=optional("fp32_matmul_share"),
        stream_share=optional("stream_share"),
        source=cells.text("source"),
        retrieved=cells.iso_date("retrieved"),
        sustained_share=optional("sustained_share"),
    )


@dataclass(frozen=True)
class _Table:
    columns: tuple[str, ...]
    optional: frozenset[str]  # columns a user file may leave out entirely (cells default)
    parse: Callable[[_Cells], Row]


_FLOPS_COLUMNS = tuple(f"{dtype}_flops" for dtype in DTYPES)

_TABLE_SPECS: dict[TableName, _Table] = {
    "accelerators": _Table(
        columns=(
            "slug",
            "name",
            "vendor",
            "kind",
            "aliases",
            "memory_bytes",
            "memory_bandwidth_bytes_per_s",
            *_FLOPS_COLUMNS,
            "tdp_w",
            "interconnect_bytes_per_s",
            "form_factor",
            "trains",
            "slice_sizes",
            "source",
            "retrieved",
        ),
        optional=frozenset(
            {"aliases", "form_factor", "trains", "slice_sizes", "interconnect_bytes_per_s", *_FLOPS_COLUMNS}
        ),
        parse=_accelerator,
    ),
    "offerings": _Table(
        columns=(
            "cloud",
            "instance_type",
            "accelerator",
            "accelerator_count",
            "vcpus",
            "ram_bytes",
            "network_bytes_per_s",
            "region",
            "on_demand_usd_per_h",
            "spot_usd_per_h",
            "reserved_1y_usd_per_h",
            "reserved_3y_usd_per_h",
            "source",
            "retrieved",
            "fabric",
        ),
        optional=frozenset({"spot_usd_per_h", "reserved_1y_usd_per_h", "reserved_3y_usd_per_h", "fabric"}),
        parse=_offering,
    ),
    "carbon": _Table(
        columns=("cloud", "region", "g_co2_per_kwh", "source", "retrieved"),
        optional=frozenset(),
        parse=_carbon,
    ),
    "onprem": _Table(
        columns=(
            "accelerator",
            "accelerator_count",
            "purchase_usd",
            "lifetime_years",
            "server_power_w",
            "ops_usd_per_year",
            "source",
            "retrieved",
        ),
        optional=frozenset(),
        parse=_onprem,
    ),
    "assumptions": _Table(
        columns=("key", "value", "unit", "source", "retrieved"),
        optional=frozenset(),
        parse=_assumption,
    ),
    "fabrics": _Table(
        columns=("fabric", "name", "network_efficiency", "latency_s", "source", "retrieved"),
        optional=frozenset(),
        parse=_fabric,
    ),
    "kernel_profiles": _Table(
        columns=(
            "accelerator",
            "matmul_share",
            "fp32_matmul_share",
            "stream_share",
            "source",
            "retrieved",
            "sustained_share",
        ),
        optional=frozenset({"fp32_matmul_share", "stream_share", "sustained_share"}),
        parse=_kernel_profile,
    ),
}


def row_key(row: Row) -> tuple[TableName, tuple[str, ...]]:
    """The table and identity of a row: a later row with the same key replaces the earlier one."""
    if isinstance(row, Accelerator):
        return "accelerators", (row.slug,)
    if isinstance(row, Offering):
        return "offerings", (row.cloud.lower(), row.instance_type.lower(), row.region.lower())
    if isinstance(row, CarbonIntensity):
        return "carbon", (row.cloud.lower(), row.region.lower())
    if isinstance(row, OnPremCost):
        return "onprem", (row.accelerator, str(row.accelerator_count))
    if isinstance(row, NetworkFabric):
        return "fabrics", (row.fabric,)
    if isinstance(row, KernelProfile):
        return "kernel_profiles", (row.accelerator,)
    return "assumptions", (row.key,)


# ------------------------------------------------------------------------------ files


def table_for_filename(path: str | Path) -> TableName:
    """A user file's table is chosen by its name (``offerings-mycloud.csv`` adds offerings)."""
    name = Path(path).name.lower()
    if name.endswith(".csv"):
        for table in TABLES:
            if name.startswith(table):
                return table
    raise InputError(
        f"cannot tell which catalog table {path} belongs to",
        "name it accelerators*.csv, offerings*.csv, carbon*.csv, onprem*.csv, assumptions*.csv, fabrics*.csv "
        "or kernel_profiles*.csv",
    )


def user_catalog_dir() -> Path:
    """``$COMPUTEWISE_CATALOG_DIR``, else ``<user config dir>/computewise/catalog`` (may not exist)."""
    configured = os.environ.get(ENV_CATALOG_DIR)
    if configured:
        return Path(configured).expanduser()
    import platformdirs  # only needed when no directory is configured

    return Path(platformdirs.user_config_dir("computewise")) / "catalog"


# Package data is installed as plain files (pyproject package-data); a Path avoids importlib.resources' import cost.
_BUNDLED_DIR = Path(__file__).resolve().parent / "data"


def bundled_files() -> tuple[SourceFile, ...]:
    return tuple(SourceFile(str(_BUNDLED_DIR / f"{table}.csv"), table, bundled=True) for table in TABLES)


def _csv_files_in(directory: Path) -> list[SourceFile]:
    paths = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() == ".csv")
    return [SourceFile(str(p), table_for_filename(p), bundled=False) for p in paths]


def discover_files(extra_paths: Sequence[Path] = ()) -> tuple[SourceFile, ...]:
    """Bundled files, then the user directory, then explicit paths (files or directories), in that order."""
    found = list(bundled_files())
    user_dir = user_catalog_dir()
    if user_dir.is_dir():
        found.extend(_csv_files_in(user_dir))
    for path in extra_paths:
        path = Path(path).expanduser()
        if path.is_dir():
            found.extend(_csv_files_in(path))
        elif path.is_file():
            found.append(SourceFile(str(path), table_for_filename(path), bundled=False))
        else:
            raise InputError(f"no catalog file or directory at {path}", "pass an existing CSV file or directory")
    return tuple(found)


def _numbered_records(text: str) -> Iterator[tuple[int, list[str]]]:
    """CSV records with the 1-based file line they end on; blank lines and '#' comments are skipped."""
    kept_lines: list[int] = []

    def lines() -> Iterator[str]:
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                kept_lines.append(number)
                yield line

    reader = csv.reader(lines())
    for record in reader:
        yield kept_lines[reader.line_num - 1], record


def _read_file(source: SourceFile) -> list[LoadedRow]:
    spec = _TABLE_SPECS[source.table]
    records = _numbered_records(source.read_text())
    first = next(records, None)
    if first is None:
        raise CatalogError(
            source.path, 1, spec.columns[0], "file is empty", f"start with the header: {','.join(spec.columns)}"
        )
    header_line, header = first
    header = [name.strip() for name in header]
    for name in header:
        if name not in spec.columns:
            close = difflib.get_close_matches(name, spec.columns, n=1)
            raise CatalogError(
                source.path,
                header_line,
                name,
                "unknown column" + (f"; did you mean {close[0]!r}?" if close else ""),
                f"{source.table} columns are: {','.join(spec.columns)}",
            )
        if header.count(name) > 1:
            raise CatalogError(source.path, header_line, name, "column appears twice in the header")
    for name in spec.columns:
        if name not in header and name not in spec.optional:
            raise CatalogError(
                source.path,
                header_line,
                name,
                "missing column",
                f"{source.table} files need the header: {','.join(spec.columns)}",
            )
    rows: list[LoadedRow] = []
    first_line: dict[tuple[str, ...], int] = {}
    for line, record in records:
        if len(record) > len(header):
            raise CatalogError(
                source.path,
                line,
                f"(cell {len(header) + 1})",
                f"row has {len(record)} cells but the header has {len(header)}",
                "quote cells that contain commas",
            )
        cells = _Cells(source.path, line, dict(zip(header, record, strict=False)))
        value = spec.parse(cells)
        table, key = row_key(value)
        if key in first_line:
            raise cells.error(
                spec.columns[0],
                f"duplicate row for {'/'.join(key)} (first on line {first_line[key]})",
                "keep one row per key; to override a bundled row, put yours in a user catalog file",
            )
        first_line[key] = line
        rows.append(LoadedRow(table, key, value, RowOrigin(source.path, line)))
    return rows


# ------------------------------------------------------------------------------ merging


def _name_index(accelerators: Sequence[LoadedRow]) -> dict[str, str]:
    """Every slug and alias (lowercase) -> slug; a name claimed by two accelerators is an error."""
    index: dict[str, str] = {}
    for loaded in accelerators:
        if not isinstance(loaded.value, Accelerator):
            continue
        acc = loaded.value
        for name in (acc.slug, *acc.aliases):
            owner = index.get(name)
            if owner is not None and owner != acc.slug:
                raise CatalogError(
                    loaded.origin.path,
                    loaded.origin.line,
                    "slug" if name == acc.slug else "aliases",
                    f"{name!r} already names accelerator {owner!r}",
                    "give each accelerator distinct slugs and aliases",
                )
            index[name] = acc.slug
    return index


def _resolve_reference(loaded: LoadedRow, names: Mapping[str, str]) -> LoadedRow:
    """Offerings, on-prem and kernel-profile rows may name an accelerator by alias: store its slug, or fail."""
    value = loaded.value
    if not isinstance(value, Offering | OnPremCost | KernelProfile):
        return loaded
    slug = names.get(value.accelerator)
    if slug is None:
        close = difflib.get_close_matches(value.accelerator, list(names), n=3, cutoff=0.5)
        raise CatalogError(
            loaded.origin.path,
            loaded.origin.line,
            "accelerator",
            f"unknown accelerator {value.accelerator!r}"
            + (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""),
            "use a slug from `computewise catalog list accelerators`, or add the accelerator in an accelerators*.csv",
        )
    if slug == value.accelerator:
        return loaded
    resolved = replace(value, accelerator=slug)
    return LoadedRow(loaded.table, row_key(resolved)[1], resolved, loaded.origin)


def _check_fabric(loaded: LoadedRow, fabrics: set[str]) -> None:
    """An offering's network must be a fabrics row, so its efficiency and latency have a source."""
    value = loaded.value
    if not isinstance(value, Offering) or not value.fabric or value.fabric in fabrics:
        return
    close = difflib.get_close_matches(value.fabric, sorted(fabrics), n=3, cutoff=0.5)
    raise CatalogError(
        loaded.origin.path,
        loaded.origin.line,
        "fabric",
        f"unknown fabric {value.fabric!r}" + (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""),
        "use a fabric from `computewise catalog list fabrics`, or add one in a fabrics*.csv",
    )


def load_files(files: Sequence[SourceFile]) -> LoadedCatalog:
    """Read, merge (later files win) and cross-check the given files."""
    merged: dict[TableName, dict[tuple[str, ...], LoadedRow]] = {table: {} for table in TABLES}
    read: list[CatalogFile] = []
    for source in files:
        rows = _read_file(source)
        for loaded in rows:
            merged[loaded.table][loaded.key] = loaded
        read.append(CatalogFile(source.path, source.table, len(rows), source.bundled))

    names = _name_index(tuple(merged["accelerators"].values()))
    for table in ("offerings", "onprem", "kernel_profiles"):
        resolved = (_resolve_reference(loaded, names) for loaded in merged[table].values())
        merged[table] = {loaded.key: loaded for loaded in resolved}
    fabrics = {key[0] for key in merged["fabrics"]}
    for loaded in merged["offerings"].values():
        _check_fabric(loaded, fabrics)
    return LoadedCatalog(
        rows={table: tuple(merged[table].values()) for table in TABLES},
        files=tuple(read),
    )
