"""``data convert in.csv out.parquet``: a row format rewritten as Parquet, with both reads timed.

The input (CSV or JSON Lines, local or a URL) is streamed block by block into a ``ParquetWriter``,
so a file larger than memory converts; the output is written to a temporary file beside the target
and renamed over it, so a failure leaves no half-written Parquet behind. Both files are then read
the way ``data bench`` reads them (parsed into numpy columns, in this process) and timed, so the
speed-up printed is measured, not promised.

``columnar_speedup`` does the same on one part of a source, in memory, for ``data bench``'s advice.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from computewise.data.sources import Part, aligned_bytes, open_file, open_source, read_part
from computewise.errors import InputError, MissingExtraError
from computewise.specs.codec import Document, Jsonable, json_field, json_property

__all__ = ["ConvertResult", "columnar_speedup", "convert", "decode_rate"]

_REPEATS = 5
_SAMPLE_BYTES = 16 * 1024 * 1024  # enough rows that a loaded host's jitter does not decide the ratio
_ROW_GROUP_ROWS = 64 * 1024  # row groups small enough for several loader workers to share one file


@dataclass(frozen=True)
class ConvertResult(Jsonable):
    json_document: ClassVar[Document] = Document(
        "data-convert",
        "data convert --json",
        "A CSV or JSON Lines file rewritten as Parquet (data.convert), with both reads timed in the same run.",
    )

    source: str
    target: str
    rows: int = field(metadata=json_field(minimum=1))
    source_bytes: int = field(metadata=json_field(minimum=0))
    target_bytes: int = field(metadata=json_field(minimum=0))
    convert_s: float = field(metadata=json_field(minimum=0))
    source_read_s: float = field(metadata=json_field(minimum=0))
    target_read_s: float = field(metadata=json_field(minimum=0))

    @json_property(
        minimum=0, description="source_read_s / target_read_s, both read into numpy columns in this process."
    )
    def read_speedup(self) -> float:
        return self.source_read_s / self.target_read_s if self.target_read_s > 0 else float("inf")


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError as error:
        raise MissingExtraError("pyarrow", "data", "data convert") from error


def _batches(fmt: str, handle: Any) -> Any:
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    reader = pcsv.open_csv(handle) if fmt == "csv" else pjson.open_json(handle)
    yield from reader


def convert(source: str, target: Path, batch_rows: int = 256) -> ConvertResult:
    """Rewrite ``source`` (CSV / JSON Lines) as Parquet at ``target``; time the conversion and both reads."""
    _require_pyarrow()
    import pyarrow.parquet as pq

    if target.suffix.lower() not in (".parquet", ".pq"):
        raise InputError(f"{target}: the output must be a .parquet file", f"e.g. {target.with_suffix('.parquet')}")
    if not target.parent.is_dir():
        raise InputError(f"{target.parent}: no such directory", "create the output directory first")
    found = open_source(source)
    if found.format not in ("csv", "jsonl"):
        raise InputError(
            f"{source} is {found.format}, not a row format", "data convert reads CSV or JSON Lines and writes Parquet"
        )
    start = time.perf_counter()
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(descriptor)
    rows = 0
    try:
        writer = None
        try:
            for name in found.files:
                with open_file(name) as handle:
                    for batch in _batches(found.format, handle):
                        if writer is None:
                            writer = pq.ParquetWriter(temporary, batch.schema)
                        writer.write_batch(batch, row_group_size=_ROW_GROUP_ROWS)
                        rows += batch.num_rows
        except Exception as error:  # pyarrow.lib.ArrowInvalid: a malformed line, a schema that changes
            if isinstance(error, InputError | MissingExtraError):
                raise
            raise InputError(
                f"cannot convert {source}: {error}", "check the file (every row the same columns)"
            ) from error
        finally:
            if writer is not None:
                writer.close()
        if rows == 0:
            raise InputError(f"{source}: no rows to convert", "point at a file that holds data")
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    convert_s = time.perf_counter() - start
    return ConvertResult(
        source=source,
        target=str(target),
        rows=rows,
        source_bytes=found.total_bytes,
        target_bytes=target.stat().st_size,
        convert_s=convert_s,
        source_read_s=_read_all_s(source, batch_rows),
        target_read_s=_read_all_s(str(target), batch_rows),
    )


def _read_all_s(text: str, batch_rows: int) -> float:
    source = open_source(text)
    start = time.perf_counter()
    for part in source.parts:
        for _item in read_part(part, batch_rows):
            pass
    return time.perf_counter() - start


def columnar_speedup(parts: Sequence[Part], batch_rows: int) -> tuple[int, float, float]:
    """(rows, seconds to read as text, seconds to read as Parquet) for the first parts of a CSV / JSON Lines file.

    Up to ``_SAMPLE_BYTES`` of the first file's lines are copied to a local file and converted to a local
    Parquet file first, so both timed reads start from the same place (this machine's page cache) and the
    ratio is the format's alone; each read is timed as the median of a few, after one untimed read that pays
    the imports.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = [p for p in parts if p.url == parts[0].url]
    taken = [p for i, p in enumerate(first) if sum(q.read_bytes for q in first[:i]) < _SAMPLE_BYTES]
    span = Part(taken[0].format, taken[0].url, taken[0].start, taken[-1].stop, 0, offset=taken[0].offset)
    with tempfile.TemporaryDirectory(prefix="computewise-columnar-") as folder:
        text_path = Path(folder) / f"sample.{span.format}"
        with open_file(span.url) as handle:
            text_path.write_bytes(aligned_bytes(handle, span))
        text_parts = open_source(str(text_path), span.format).parts  # cut as the loader cuts the original
        batches = [payload for part in text_parts for _rows, _size, payload in read_part(part, batch_rows)]
        if not batches:
            return 0, 0.0, 0.0
        parquet_path = Path(folder) / "sample.parquet"
        table = pa.concat_tables([pa.table(batch) for batch in batches])
        pq.write_table(table, parquet_path, row_group_size=_ROW_GROUP_ROWS)  # as `data convert` writes it
        parquet_parts = open_source(str(parquet_path)).parts
        text_s = _median_of(_REPEATS, lambda: _drain(text_parts, batch_rows))
        parquet_s = _median_of(_REPEATS, lambda: _drain(parquet_parts, batch_rows))
        return sum(len(next(iter(batch.values()))) for batch in batches), text_s, parquet_s


def decode_rate(parts: Sequence[Part], batch_rows: int) -> tuple[int, float]:
    """(samples, seconds) to read and decode the first ``_SAMPLE_BYTES`` of ``parts`` in this process.

    The format's own speed, with no worker processes and no batches crossing between them: set against
    the DataLoader's rate it shows what the loader's transport costs. The median of a few after a warm-up read.
    """
    taken = [p for i, p in enumerate(parts) if sum(q.read_bytes for q in parts[:i]) < _SAMPLE_BYTES]
    samples = _drain(taken, batch_rows)
    return samples, _median_of(_REPEATS, lambda: _drain(taken, batch_rows))


def _drain(parts: Sequence[Part], batch_rows: int) -> int:
    samples = 0
    for part in parts:
        for rows, _size, _payload in read_part(part, batch_rows):
            samples += rows
    return samples


def _median_of(repeats: int, work: Callable[[], object]) -> float:
    """The median of ``repeats`` timed runs (after the caller's untimed one, which pays imports and a cold
    cache): a loaded host's jitter moves it less than the mean, and a lucky moment less than the minimum."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
