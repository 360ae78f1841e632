"""What ``data bench SOURCE`` reads: a file, a folder or a URL, cut into parts that loader workers share.

A SOURCE is Parquet, CSV, JSON Lines, ``.npy`` (an array, or a 1-D token file read in windows of
``seq_len`` tokens), a headerless ``.bin`` token file (as nanoGPT and its kin memory-map them),
WebDataset ``.tar`` shards, or a folder of images; a folder (or prefix) holding files of one kind
is that kind. Paths are local or fsspec URLs (``s3://``, ``gs://``).

Each source is cut into ``Part``s, the unit one worker reads whole, so that N workers split the data
the way a sharded ``IterableDataset`` does: a Parquet row group, a byte range of a CSV or JSON Lines
file (aligned to line ends when read), a run of ``.npy`` / ``.bin`` samples, a ``.tar`` shard, a run of image
files. Reading a part yields ``(rows, bytes read, payload)`` batches: the payload is what a training
step would get (numeric columns as numpy arrays, samples as bytes), so decoding is measured too.

pyarrow (Parquet, CSV, JSON Lines) and fsspec (URLs) come from the ``data`` extra and are imported
inside functions; ``.npy``, ``.bin``, ``.tar`` and image folders on local disk need neither.
"""

from __future__ import annotations

import io
import math
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from computewise.errors import InputError, MissingExtraError
from computewise.system.objectstore import is_url, locate, open_store, open_url, translated

__all__ = [
    "FORMATS",
    "IMAGE_SUFFIXES",
    "Item",
    "Part",
    "Source",
    "aligned_bytes",
    "is_entry_point",
    "open_file",
    "open_source",
    "read_part",
]

FORMATS = ("parquet", "csv", "jsonl", "npy", "bin", "tar", "images")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
_SUFFIXES: dict[str, str] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".npy": "npy",
    ".bin": "bin",
    ".tar": "tar",
    **dict.fromkeys(IMAGE_SUFFIXES, "images"),
}
_IMAGES_PER_PART = 64
_MAX_PART_BYTES = 8 * 1024 * 1024  # big enough to parse in blocks, small enough for workers to share
_MIN_PART_BYTES = 256 * 1024
_PARTS_PER_FILE = 16  # a small file still gives every worker of a large host something to read


def _part_bytes(size: int) -> int:
    return max(_MIN_PART_BYTES, min(_MAX_PART_BYTES, size // _PARTS_PER_FILE))


Item = tuple[int, int, Any]
"""One batch as a loader yields it: (samples, bytes read from storage for it, the payload)."""


@dataclass(frozen=True)
class Part:
    """One unit of work a loader worker reads whole; ``start``/``stop`` are bytes, rows or a row group."""

    format: str
    url: str
    start: int
    stop: int
    read_bytes: int  # bytes this part reads from storage (nominal for byte ranges: exact once aligned)
    files: tuple[str, ...] = ()  # images: the files of this part
    dtype: str = ""  # npy: the element type
    row_shape: tuple[int, ...] = ()  # npy: the shape of one sample
    offset: int = 0  # npy: where the data starts; csv: bytes of the header line


@dataclass(frozen=True)
class Source:
    """A dataset found at ``text``: its format, files, size and parts."""

    text: str
    format: str
    files: tuple[str, ...]
    total_bytes: int
    parts: tuple[Part, ...]
    rows: int | None  # known without reading the data (Parquet metadata, .npy shape), else None
    sample: str  # what one sample is, in words


def is_entry_point(text: str) -> bool:
    """``package.module:function`` rather than a path (a Windows drive letter or a URL is a path)."""
    module, colon, attribute = text.partition(":")
    return (
        bool(colon)
        and "/" not in text
        and "\\" not in text
        and module.replace(".", "").isidentifier()
        and (attribute.isidentifier())
    )


def _pyarrow(feature: str) -> Any:
    try:
        import pyarrow
    except ImportError as error:
        raise MissingExtraError("pyarrow", "data", feature) from error
    return pyarrow


def open_file(url: str) -> IO[bytes]:
    """A local file or a URL opened for reading; a store's failure is an ``InputError`` (``system.objectstore``)."""
    return open_url(url) if is_url(url) else open(url.removeprefix("file://"), "rb")


def _listing(text: str) -> list[tuple[str, int]]:
    """The files at ``text`` with their sizes: the file itself, or every file under a folder or prefix."""
    if is_url(text):
        fs, key = open_store(text)
        info = locate(fs, text, key)
        if info.get("type") != "directory":
            return [(text, int(info.get("size") or 0))]
        with translated(text):
            found = fs.find(key, detail=True)
        protocol = text.split("://", 1)[0]
        return sorted((f"{protocol}://{name}", int(info.get("size") or 0)) for name, info in found.items())
    path = Path(text.removeprefix("file://"))
    if path.is_dir():
        return sorted((str(p), p.stat().st_size) for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if path.is_file():
        return [(str(path), path.stat().st_size)]
    raise InputError(
        f"{text}: no such file or directory",
        "pass a Parquet/CSV/JSON Lines/.npy/.bin/.tar file, a folder of them or of images, a URL, "
        "or package.module:function",
    )


def _format_of(files: list[tuple[str, int]], text: str, forced: str | None) -> str:
    if forced is not None:
        if forced not in FORMATS:
            raise InputError(f"--format must be one of {', '.join(FORMATS)}, got {forced!r}", "e.g. --format parquet")
        return forced
    kinds = {_SUFFIXES.get(os.path.splitext(name)[1].lower()) for name, _ in files}
    single = kinds.pop() if len(kinds) == 1 else None
    if single is not None:
        return single
    kinds = {_SUFFIXES.get(os.path.splitext(name)[1].lower()) for name, _ in files}
    known = ", ".join(sorted(_SUFFIXES))
    if None in kinds:
        odd = next(name for name, _ in files if _SUFFIXES.get(os.path.splitext(name)[1].lower()) is None)
        raise InputError(
            f"{text}: unknown data format of {odd!r}",
            f"name files by their format ({known}) or pass --format {{{','.join(FORMATS)}}}",
        )
    raise InputError(
        f"{text} mixes formats ({', '.join(sorted(k for k in kinds if k))})",
        "point at a folder that holds one format, or pass --format to read only that one",
    )


def open_source(
    text: str, forced_format: str | None = None, seq_len: int = 1024, token_dtype: str = "uint16"
) -> Source:
    """The dataset at ``text`` (a path or URL), listed and cut into parts; bad input is an ``InputError``.

    ``seq_len`` tokens make one sample of a 1-D token file; ``token_dtype`` is the element type of a
    headerless ``.bin`` token file (uint16 is nanoGPT's, enough for a vocabulary under 65,536)."""
    listing = [(name, size) for name, size in _listing(text) if size > 0]
    if not listing:
        raise InputError(f"{text}: the dataset is empty (no files, or only empty ones)", "point at the data itself")
    fmt = _format_of(listing, text, forced_format)
    if forced_format is not None:
        wanted = {suffix for suffix, kind in _SUFFIXES.items() if kind == forced_format}
        listing = [(n, s) for n, s in listing if os.path.splitext(n)[1].lower() in wanted] or listing
    total = sum(size for _, size in listing)
    parts: list[Part] = []
    rows: int | None = None
    if fmt == "parquet":
        parts, rows = _parquet_parts(listing)
        sample = "one row"
    elif fmt in ("csv", "jsonl"):
        parts = [p for name, size in listing for p in _text_parts(fmt, name, size)]
        rows = None if any(p.stop > p.start for p in parts) else 0  # headers alone hold no sample
        sample = "one line" if fmt == "jsonl" else "one row"
    elif fmt in ("npy", "bin"):
        parts, rows, sample = _array_parts(listing, fmt, seq_len, token_dtype)
    elif fmt == "tar":
        parts = [Part("tar", name, 0, size, size) for name, size in listing]
        sample = "the files of one key in a shard (WebDataset)"
    else:
        parts = [
            Part("images", chunk[0][0], 0, len(chunk), sum(s for _, s in chunk), files=tuple(n for n, _ in chunk))
            for chunk in (listing[i : i + _IMAGES_PER_PART] for i in range(0, len(listing), _IMAGES_PER_PART))
        ]
        rows = len(listing)
        sample = "one image file"
    if rows == 0 or not parts:
        raise InputError(f"{text}: the dataset has no samples", "point at a file or folder that holds data")
    return Source(text, fmt, tuple(n for n, _ in listing), total, tuple(parts), rows, sample)


def _parquet_parts(listing: list[tuple[str, int]]) -> tuple[list[Part], int]:
    _pyarrow("reading Parquet")
    import pyarrow.parquet as pq

    parts: list[Part] = []
    rows = 0
    for name, _size in listing:
        with open_file(name) as handle:
            try:
                meta = pq.ParquetFile(handle).metadata
            except Exception as error:  # pyarrow raises ArrowInvalid (a ValueError) and OSError alike
                raise InputError(
                    f"{name} is not a Parquet file: {error}", "check the file, or pass --format"
                ) from error
        for index in range(meta.num_row_groups):
            group = meta.row_group(index)
            compressed = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
            if group.num_rows:
                parts.append(Part("parquet", name, index, index + 1, compressed))
            rows += group.num_rows
    return parts, rows


def _text_parts(fmt: str, name: str, size: int) -> list[Part]:
    """Byte ranges of one CSV / JSON Lines file; a CSV's header line is read once and given to every part."""
    header = 0
    if fmt == "csv":
        with open_file(name) as handle:
            header = len(handle.readline())
    count = max(1, math.ceil((size - header) / _part_bytes(size)))
    step = math.ceil((size - header) / count) if size > header else 0
    bounds = [header + i * step for i in range(count)] + [size]
    return [
        Part(fmt, name, bounds[i], bounds[i + 1], bounds[i + 1] - bounds[i] + (header if i == 0 else 0), offset=header)
        for i in range(count)
        if bounds[i] < bounds[i + 1] or i == 0
    ]


def _npy_header(name: str) -> tuple[tuple[int, ...], Any, int]:
    """(shape, dtype, data offset) of a ``.npy`` file, read from its header alone."""
    import numpy as np

    with open_file(name) as handle:
        try:
            version = np.lib.format.read_magic(handle)
            header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )  # version 3.0 differs from 2.0 only in the encoding of field names
            shape, fortran, dtype = header(handle)
        except ValueError as error:
            raise InputError(f"{name} is not a .npy file: {error}", "write it with numpy.save") from error
        offset = handle.tell()
    if fortran and len(shape) > 1:
        raise InputError(
            f"{name} is stored in Fortran order: its samples are not contiguous",
            "save it with numpy.save(path, numpy.ascontiguousarray(array))",
        )
    if dtype.hasobject:
        raise InputError(f"{name} holds Python objects, not numbers", "save numeric arrays only")
    return tuple(int(n) for n in shape), dtype, offset


def _array_parts(
    listing: list[tuple[str, int]], fmt: str, seq_len: int, token_dtype: str
) -> tuple[list[Part], int, str]:
    """Runs of samples of ``.npy`` arrays or headerless token files (``.bin``, as nanoGPT memory-maps them)."""
    import numpy as np

    parts: list[Part] = []
    rows = 0
    sample = ""
    for name, size in listing:
        if fmt == "npy":
            shape, dtype, offset = _npy_header(name)
        else:
            try:
                dtype = np.dtype(token_dtype)
            except TypeError as error:
                raise InputError(f"--token-dtype {token_dtype!r} is not a numpy type", "e.g. uint16") from error
            shape, offset = (size // dtype.itemsize,), 0
        if len(shape) <= 1:  # a token stream: one sample is seq_len tokens, as a language model reads it
            row_shape: tuple[int, ...] = (seq_len,)
            count = (shape[0] if shape else 0) // seq_len
            sample = f"{seq_len} {dtype.name} tokens of a 1-D token file (--seq-len)"
        else:
            row_shape = shape[1:]
            count = shape[0]
            sample = f"one row of shape {row_shape}"
        row_bytes = max(1, int(np.prod(row_shape)) * dtype.itemsize)
        per_part = max(1, _part_bytes(count * row_bytes) // row_bytes)
        for start in range(0, count, per_part):
            stop = min(count, start + per_part)
            rows_bytes = (stop - start) * row_bytes
            parts.append(
                Part("npy", name, start, stop, rows_bytes, dtype=dtype.str, row_shape=row_shape, offset=offset)
            )
        rows += count
    return parts, rows, sample


# -- reading ----------------------------------------------------------------------------------


def read_part(part: Part, batch_rows: int) -> Iterator[Item]:
    """The batches of one part, each with its sample count and the bytes read for it."""
    if part.format == "parquet":
        yield from _read_parquet(part, batch_rows)
    elif part.format in ("csv", "jsonl"):
        yield from _read_text(part, batch_rows)
    elif part.format == "npy":
        yield from _read_npy(part, batch_rows)
    elif part.format == "tar":
        yield from _read_tar(part, batch_rows)
    else:
        yield from _read_images(part, batch_rows)


def _shares(total: int, counts: list[int]) -> list[int]:
    """``total`` bytes split over batches in proportion to their rows; the shares add up exactly."""
    rows = sum(counts)
    shares = [total * n // rows for n in counts] if rows else [0] * len(counts)
    if shares:
        shares[-1] += total - sum(shares)
    return shares


def _columns(batch: Any) -> dict[str, Any]:
    """A record batch as a training step gets it: one writable numpy array per column (strings become objects).

    Writable because ``torch.as_tensor`` (the DataLoader's conversion) warns on, and may not write to, a
    read-only zero-copy view: a real loader pays for that copy, so the measurement does too."""
    columns = batch.schema.names
    return {name: batch.column(i).to_numpy(zero_copy_only=False, writable=True) for i, name in enumerate(columns)}


def _read_parquet(part: Part, batch_rows: int) -> Iterator[Item]:
    import pyarrow.parquet as pq

    with open_file(part.url) as handle:
        batches = list(pq.ParquetFile(handle).iter_batches(batch_size=batch_rows, row_groups=[part.start]))
    counts = [b.num_rows for b in batches]
    for batch, share in zip(batches, _shares(part.read_bytes, counts), strict=True):
        yield batch.num_rows, share, _columns(batch)


def aligned_bytes(handle: IO[bytes], part: Part) -> bytes:
    """The header (CSV) and the lines of ``part``, as a file of their own would hold them."""
    handle.seek(0)
    header = handle.read(part.offset) if part.format == "csv" else b""
    return header + _aligned_range(handle, part)


def _aligned_range(handle: IO[bytes], part: Part) -> bytes:
    """The lines of ``part``: from the first line starting at or after ``start`` to the one holding ``stop - 1``.

    A line belongs to the part in which it starts, so consecutive parts cover every line once. (A CSV
    field holding a quoted newline would be cut: such files should be converted, not split.)
    """
    begin = part.start
    if part.start > part.offset:
        handle.seek(part.start - 1)
        skipped = handle.readline()  # ends at the first newline at or after start - 1
        begin = part.start - 1 + len(skipped)
    handle.seek(begin)
    if begin >= part.stop:
        return b""
    data = handle.read(part.stop - begin)
    if not data.endswith(b"\n"):
        data += handle.readline()  # the rest of the line that straddles stop
    return data


def _read_text(part: Part, batch_rows: int) -> Iterator[Item]:
    _pyarrow("reading CSV and JSON Lines")
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    with open_file(part.url) as handle:
        header = handle.read(part.offset) if part.format == "csv" else b""
        body = _aligned_range(handle, part)
    read_bytes = len(body) + (len(header) if part.start == part.offset else 0)
    if not body.strip():
        return
    try:
        table = pcsv.read_csv(io.BytesIO(header + body)) if part.format == "csv" else pjson.read_json(io.BytesIO(body))
    except Exception as error:  # pyarrow.lib.ArrowInvalid: a malformed line
        raise InputError(
            f"{part.url}: cannot parse bytes {part.start}-{part.stop}: {error}", "check the file"
        ) from error
    batches = table.to_batches(max_chunksize=batch_rows)
    counts = [b.num_rows for b in batches]
    for batch, share in zip(batches, _shares(read_bytes, counts), strict=True):
        yield batch.num_rows, share, _columns(batch)


def _read_npy(part: Part, batch_rows: int) -> Iterator[Item]:
    import numpy as np

    dtype = np.dtype(part.dtype)
    row_bytes = int(np.prod(part.row_shape)) * dtype.itemsize
    with open_file(part.url) as handle:
        for start in range(part.start, part.stop, batch_rows):
            stop = min(part.stop, start + batch_rows)
            handle.seek(part.offset + start * row_bytes)
            raw = handle.read((stop - start) * row_bytes)
            yield stop - start, len(raw), np.frombuffer(raw, dtype=dtype).reshape(-1, *part.row_shape).copy()


def _read_tar(part: Part, batch_rows: int) -> Iterator[Item]:
    """WebDataset: consecutive members sharing a key (the name up to its first dot) form one sample."""
    samples: list[dict[str, bytes]] = []
    sizes: list[int] = []
    key: str | None = None
    with open_file(part.url) as handle, tarfile.open(fileobj=handle, mode="r|*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            base = member.name.rsplit("/", 1)[-1]
            stem, _, extension = base.partition(".")
            member_key = member.name[: len(member.name) - len(base)] + stem
            extracted = archive.extractfile(member)
            payload = extracted.read() if extracted is not None else b""
            if member_key != key:
                if len(samples) == batch_rows:
                    yield len(samples), sum(sizes), samples
                    samples, sizes = [], []
                samples.append({})
                sizes.append(0)
                key = member_key
            samples[-1][extension] = payload
            sizes[-1] += member.size
    if samples:
        yield len(samples), sum(sizes), samples


def _read_images(part: Part, batch_rows: int) -> Iterator[Item]:
    """Image files read and, where Pillow is installed, decoded to arrays (the work a loader does)."""
    try:
        from PIL import Image
    except ImportError:
        Image = None
    import numpy as np

    batch: list[Any] = []
    read = 0
    for name in part.files:
        with open_file(name) as handle:
            raw = handle.read()
        read += len(raw)
        batch.append(np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")) if Image is not None else raw)
        if len(batch) == batch_rows:
            yield len(batch), read, batch
            batch, read = [], 0
    if batch:
        yield len(batch), read, batch
