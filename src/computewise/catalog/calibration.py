"""A calibration: what ``computewise bench --save`` measured on this machine, read back by the estimators.

The catalog's data sheets give peaks; a step reaches only a share of them, which the estimators
otherwise take from the accelerator's kernel profile (kernel_profiles.csv) or assume
(``matmul_peak_fraction``). A calibration replaces both with measurements of the machine at hand:

- ``peak_flops``: the best matmul FLOP/s per dtype (the sweep's peak, not the data sheet's);
- ``matmul_curves``: per dtype, the share of that peak a square matmul of each size reaches;
- ``step_curve``: the share of the fp32 peak a whole reference training step of the small GPT
  reaches (``bench.reference``), by equivalent matmul size: norms, attention, optimizer and
  framework overhead included, which is what makes a small model on a CPU predictable;
- ``memory_bandwidth_bytes_per_s``: the STREAM-triad bandwidth;
- ``launch_s``: seconds the host needs per kernel launch from torch, queued back to back
  (``bench.launch``); the matmul curves leave it out (timed from a CUDA graph), so a time model adds it
  per kernel a step launches; None in files saved before it was measured.

A device with no catalog row (the CPU of a cloud VM, a GPU the catalog lacks) gets one from the
calibration itself: ``device_row`` holds an accelerators.csv row named ``cpu-<host>`` with the
alias ``this-cpu`` (``gpu-<host>`` / ``this-gpu``), written beside the JSON as
``accelerators-bench-<slug>.csv`` so the ordinary catalog loader finds it and ``--gpu this-cpu``
works. The files live in ``user_catalog_dir()`` and are found by device slug
(``find_calibration``), or passed with ``--calibration FILE``.

Every figure is held to a sane range where a calibration is made or read (``Calibration._checked``):
one edited by hand or timed wrong (a peak of 0 or 1e-300, a negative bandwidth) is refused by
name, as the estimators would otherwise answer NaN, fall back to another dtype, or run faster.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from computewise.catalog.loader import user_catalog_dir
from computewise.errors import InputError
from computewise.limits import Limit
from computewise.specs.codec import Document, Jsonable, json_field, json_property
from computewise.specs.document import read_float, read_list, read_mapping, read_str, require_object
from computewise.system.files import write_text_atomic
from computewise.units import check_range

__all__ = [
    "Calibration",
    "Curve",
    "CurvePoint",
    "calibration_catalog_paths",
    "calibration_for",
    "companion_catalog_file",
    "curve",
    "equivalent_matmul_size",
    "find_calibration",
    "load_calibration",
    "measured_peak_flops",
    "save",
]

_ACCELERATOR_COLUMNS = (
    "slug", "name", "vendor", "kind", "aliases", "memory_bytes", "memory_bandwidth_bytes_per_s",
    "fp32_flops", "tf32_flops", "bf16_flops", "fp16_flops", "fp8_flops", "int8_flops",
    "tdp_w", "interconnect_bytes_per_s", "form_factor", "trains", "source", "retrieved",
)  # fmt: skip
_ROW_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
_PEAK_FLOPS = Limit(
    1e6, 1e18, "no chip nears an exaFLOP/s, an H100 reaches 1e15; below 1e6 the timing broke", "7e14", unit="FLOP/s"
)
_BANDWIDTH = Limit(
    1e6, 1e14, "no memory moves 100 TB/s, an H200's moves 4.8 TB/s; below 1 MB/s the timing broke", "3e12", unit="B/s"
)
_LAUNCH_S = Limit(1e-8, 1, "a kernel launch takes microseconds; a second per launch is a hung host", "5e-6", unit="s")
_SIZE = Limit(1, 1e7, "a matmul's side in rows: one of side 1e7 would need 400 TB at fp32", "4096")
# A share above 1 is real when a step beats the sweep's dtype (TF32 inside an fp32 step on a GPU).
_SHARE = Limit(
    1e-6, 20, "a share of the measured peak: a millionth of it or 20 times it is an edit or a broken timing", "0.5"
)
_REMEASURE = "re-run computewise bench --save on that machine (it writes every figure from a measurement)"


def equivalent_matmul_size(tokens_per_microbatch: float, hidden: float) -> float:
    """Side of the square matmul with the FLOPs of a (tokens x hidden) @ (hidden x hidden) product.

    One number per step shape, so a training step and a square matmul sweep share one axis: the
    reference steps are keyed by it when measured and a job is looked up by it when estimated.
    """
    return float(math.cbrt(max(tokens_per_microbatch, 1.0) * max(hidden, 1.0) ** 2))


@dataclass(frozen=True, order=True)
class CurvePoint(Jsonable):
    """One point of an efficiency curve: a square matmul's size (or a training step's equivalent one) and the
    share of the peak it reached."""

    json_description: ClassVar[str] = "A matmul size (or a step's equivalent one) and the share of the peak it reached."

    size: float = field(metadata=json_field(minimum=_SIZE.low, maximum=_SIZE.high))
    fraction: float = field(metadata=json_field(minimum=_SHARE.low, maximum=_SHARE.high))


Curve = tuple[CurvePoint, ...]


def curve(points: Iterable[tuple[float, float]]) -> Curve:
    """A curve from ``(size, fraction)`` pairs, smallest size first."""
    return tuple(sorted(CurvePoint(size, fraction) for size, fraction in points))


@dataclass(frozen=True)
class Calibration(Jsonable):
    """Measured peaks and efficiency of one device on one host, with where they came from."""

    json_document: ClassVar[Document] = Document(
        "calibration",
        "bench --save",
        "Measured peaks and efficiency of one device (catalog.calibration.Calibration), saved as "
        "calibration-<device>.json in the user catalog directory and read by estimate train when it estimates "
        "that device or is given --calibration FILE.",
    )

    device_slug: str = field(
        metadata=json_field(
            description="The catalog accelerator it calibrates (cpu-HOST for a device the catalog lacks)."
        )
    )
    device_name: str
    host: str
    date: str = field(metadata=json_field(description="ISO date of the bench run (YYYY-MM-DD)."))
    peak_flops: dict[str, float] = field(  # the sweep's best median
        metadata=json_field(
            description="Best measured matmul FLOP/s per dtype.",
            additional_properties={"type": "number", "minimum": _PEAK_FLOPS.low, "maximum": _PEAK_FLOPS.high},
        )
    )
    matmul_curves: dict[str, Curve] = field(
        metadata=json_field(description="Per dtype: the share of the peak a square matmul of each size reaches.")
    )
    step_curve: Curve = field(
        metadata=json_field(
            description="Share of the fp32 peak whole reference training steps reached, by equivalent matmul size."
        )
    )
    memory_bandwidth_bytes_per_s: float | None = field(
        metadata=json_field(minimum=_BANDWIDTH.low, maximum=_BANDWIDTH.high, description="The STREAM-triad bandwidth.")
    )
    device_row: dict[str, str] | None = field(  # an accelerators.csv row when the catalog has none
        default=None,
        metadata=json_field(
            description="An accelerators.csv row (column name to cell text) for a device the catalog lacks; also "
            "written as accelerators-bench-<slug>.csv."
        ),
    )
    launch_s: float | None = field(  # host seconds per kernel launch, back to back (bench.launch)
        default=None,
        metadata=json_field(
            minimum=_LAUNCH_S.low,
            maximum=_LAUNCH_S.high,
            description="Host seconds per kernel launch from torch, queued back to back (bench's launch figure); "
            "null in calibrations written before it was measured (the oldest lack the key, and still read).",
        ),
    )

    @json_property(after="date", description="computewise bench on HOST, DATE")
    def source(self) -> str:
        return f"computewise bench on {self.host}, {self.date}"

    @property
    def note(self) -> str:
        """What the estimators print when they use it."""
        return f"utilization measured by bench on {self.date} ({self.host}, {self.device_name})"

    @classmethod
    def from_dict(cls, data: object, source: str = "") -> Self:
        """The file as bench wrote it, every figure in its range (``_checked``)."""
        return super().from_dict(data, source)._checked(source or cls.json_document.title)

    def _checked(self, source: str) -> Self:
        """Itself, once every measured figure lies in its range; else an ``InputError`` naming ``source`` and
        the key, so that no estimate divides by a zero, negative or vanishing peak, bandwidth or share."""
        for key, value, limit in self._figures():
            try:
                check_range(value, f"{source}: {key}", limit)
            except InputError as error:  # its hint is for a typed value; this one was measured
                raise InputError(error.message, _REMEASURE) from None
        return self

    def _figures(self) -> Iterator[tuple[str, float, Limit]]:
        """Every measured figure: its key in the file, its value and its range."""
        for dtype, peak in self.peak_flops.items():
            yield f"peak_flops.{dtype}", peak, _PEAK_FLOPS
        curves = {f"matmul_curves.{dtype}": points for dtype, points in self.matmul_curves.items()}
        for key, points in (curves | {"step_curve": self.step_curve}).items():
            for i, point in enumerate(points):
                yield f"{key}[{i}].size", point.size, _SIZE
                yield f"{key}[{i}].fraction", point.fraction, _SHARE
        if self.memory_bandwidth_bytes_per_s is not None:
            yield "memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s, _BANDWIDTH
        if self.launch_s is not None:
            yield "launch_s", self.launch_s, _LAUNCH_S

    @classmethod
    def from_bench_dict(cls, result: Mapping[str, Any], memory_bytes: float | None = None) -> Calibration:
        """The calibration of the main device of a ``BenchResult.to_dict()`` (the first GPU, else the CPU).

        ``memory_bytes`` sizes the device row of a device the catalog lacks (default: this host's RAM).
        """
        source = "bench result"
        devices = [require_object(item, "device", source) for item in read_list(result, "devices", source)]
        gpus = [d for d in devices if read_str(d, "device", source) != "cpu"]
        main = (gpus or devices)[0] if devices else {"device": "cpu", "name": read_str(result, "cpu", source)}
        device = str(main["device"])
        host = read_str(result, "host", source)
        day = read_str(result, "date", source)[:10]
        slug = main.get("catalog_slug")
        peaks: dict[str, float] = {}
        curves: dict[str, Curve] = {}
        for item in read_list(result, "matmul", source):
            figure = require_object(item, "matmul figure", source)
            if read_str(figure, "device", source) != device:
                continue
            dtype = read_str(figure, "dtype", source)
            peaks[dtype] = read_float(figure, "peak_tflops", source) * 1e12
            curves[dtype] = _curve(read_list(figure, "efficiency", source), source)
        if not peaks:
            raise InputError(
                f"the bench result has no matmul figure for {device}, so there is nothing to calibrate with",
                "run computewise bench without skipping the matmul sweep",
            )
        bandwidth = None
        for item in read_list(result, "bandwidth", source):
            figure = require_object(item, "bandwidth figure", source)
            if read_str(figure, "device", source) == device and read_str(figure, "kind", source) == "triad":
                bandwidth = read_float(read_mapping(figure, "gb_per_s", source), "median", source) * 1e9
        launch_s = None
        for item in result.get("launch") or ():  # absent from results written before launch was measured
            figure = require_object(item, "launch figure", source)
            if read_str(figure, "device", source) == device:
                launch_s = read_float(read_mapping(figure, "back_to_back_s", source), "median", source)
        fp32_peak = peaks.get("fp32", 0.0)
        step_curve: list[tuple[float, float]] = []
        for item in read_list(result, "reference", source):
            step = require_object(item, "reference step", source)
            if step.get("kind") != "train" or step.get("device") != device or fp32_peak <= 0:
                continue
            seconds = read_float(read_mapping(step, "step_s", source), "median", source)
            step_curve.append(
                (read_float(step, "matmul_size", source), read_float(step, "flops", source) / seconds / fp32_peak)
            )
        name = str(main.get("name") or device)
        row = None
        if not slug:
            kind = "cpu" if device == "cpu" else "gpu"
            slug = f"{kind}-{_slugify(host)}"
            row = _device_row(slug, kind, name, peaks, bandwidth, memory_bytes, host, day)
        return cls(
            device_slug=str(slug),
            device_name=name,
            host=host,
            date=day,
            peak_flops=peaks,
            matmul_curves=curves,
            step_curve=curve(step_curve),
            memory_bandwidth_bytes_per_s=bandwidth,
            device_row=row,
            launch_s=launch_s,
        )._checked(source)


def _curve(points: Sequence[Any], source: str) -> Curve:
    return tuple(sorted(CurvePoint.from_dict(point, source) for point in points))


def _slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "host"


def _host_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1.0  # unknown: the row still loads; memory checks then fail loudly rather than pass


def _device_row(
    slug: str,
    kind: str,
    name: str,
    peaks: Mapping[str, float],
    bandwidth: float | None,
    memory_bytes: float | None,
    host: str,
    day: str,
) -> dict[str, str]:
    """An accelerators.csv row for a device the catalog lacks, every figure measured here."""
    row = {
        "slug": slug,
        "name": f"{name} on {host} (measured)",
        "vendor": name.split()[0] if name.split() else "unknown",
        "kind": kind,
        "aliases": f"this-{kind}",
        "memory_bytes": f"{memory_bytes or _host_memory_bytes():.0f}",
        "memory_bandwidth_bytes_per_s": f"{bandwidth or 1.0:.6g}",
        "tdp_w": "0",
        "interconnect_bytes_per_s": "0",
        "form_factor": "this machine",
        "trains": "yes",
        "source": f"computewise bench on {host}, {day}: measured matmul peaks and triad bandwidth; no TDP",
        "retrieved": day,
    }
    for dtype in _ROW_DTYPES:
        row[f"{dtype}_flops"] = f"{peaks.get(dtype, 0.0):.6g}"
    return row


def _file_name(slug: str) -> str:
    return f"calibration-{slug}.json"


def companion_catalog_file(calibration_path: Path, calibration: Calibration) -> Path | None:
    """The accelerators CSV that carries the calibration's own device row, when it has one and it exists."""
    if calibration.device_row is None:
        return None
    path = calibration_path.parent / f"accelerators-bench-{calibration.device_slug}.csv"
    return path if path.is_file() else None


def save(calibration: Calibration, directory: Path | None = None) -> Path:
    """Write ``calibration-<slug>.json`` (and the device's catalog row, if it carries one); the JSON's path."""
    target = Path(directory) if directory is not None else user_catalog_dir()
    try:
        target.mkdir(parents=True, exist_ok=True)
        if calibration.device_row is not None:
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=_ACCELERATOR_COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerow(dict(calibration.device_row))
            write_text_atomic(target / f"accelerators-bench-{calibration.device_slug}.csv", buffer.getvalue())
        path = target / _file_name(calibration.device_slug)
        write_text_atomic(path, json.dumps(calibration.to_dict(), indent=2) + "\n")
    except OSError as error:
        raise InputError(
            f"cannot write the calibration into {target}: {error.strerror or error}",
            "check the directory's permissions, or set $COMPUTEWISE_CATALOG_DIR to a writable one",
        ) from error
    return path


def load_calibration(path: Path) -> Calibration:
    """Read a calibration file; a missing or malformed one is an ``InputError`` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(
            f"cannot read calibration file {path}: {error.strerror or error}",
            "pass the file computewise bench --save wrote (calibration-<device>.json in the user catalog directory)",
        ) from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"calibration file {path} is not JSON: {error}", "pass the file bench --save wrote") from error
    return Calibration.from_dict(data, str(path))


def find_calibration(slug: str, directory: Path | None = None) -> Calibration | None:
    """The saved calibration of accelerator ``slug`` in the user catalog directory, or None."""
    path = (directory if directory is not None else user_catalog_dir()) / _file_name(slug)
    return load_calibration(path) if path.is_file() else None


def calibration_catalog_paths(path: Path | None) -> tuple[Path, ...]:
    """Catalog files a ``--calibration FILE`` brings along: its device's own row, when it carries one."""
    if path is None:
        return ()
    companion = companion_catalog_file(Path(path), load_calibration(path))
    return () if companion is None else (companion,)


def calibration_for(slug: str, path: Path | None = None, aliases: Sequence[str] = ()) -> Calibration | None:
    """The calibration an estimate of accelerator ``slug`` uses: ``path`` if given (it must be for that
    device), else the one ``bench --save`` left in the user catalog directory, else None."""
    if path is None:
        return find_calibration(slug)
    calibration = load_calibration(path)
    names = {slug, *aliases}
    row_aliases = set((calibration.device_row or {}).get("aliases", "").split("|")) - {""}
    if calibration.device_slug not in names and not names & row_aliases:
        raise InputError(
            f"calibration file {path} is for {calibration.device_slug}, not {slug}",
            f"pass --gpu {calibration.device_slug}, or a calibration that bench saved on a {slug}",
        )
    return calibration


def measured_peak_flops(slug: str, precision: str, path: Path | None = None) -> tuple[float, Calibration] | None:
    """The matmul peak ``bench --save`` measured for accelerator ``slug`` at ``precision``, and its calibration.

    What ``tune`` and ``run`` divide by for MFU when the device was benched: the peak it reaches,
    not the data sheet's (None: no calibration, or none at that precision). ``path`` is a
    ``--calibration FILE``, which must be for that device; without it, the one saved for it.
    """
    calibration = calibration_for(slug, path)
    if calibration is None:
        return None
    peak = calibration.peak_flops.get(precision, 0.0)
    return (peak, calibration) if peak > 0 else None
