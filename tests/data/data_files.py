"""Real small datasets written into tmp_path, with the counts a test compares the loader against."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest


@dataclass(frozen=True)
class Written:
    path: Path
    rows: int


def table(rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "id": np.arange(rows, dtype=np.int64),
        "x": rng.random(rows),
        "label": rng.integers(0, 10, rows),
    }


@pytest.fixture
def csv_file(tmp_path: Path) -> Written:
    """A CSV of about 3 MB written by hand (not by pyarrow), so the reader is checked against another writer."""
    rows = 80_000
    columns = table(rows)
    path = tmp_path / "train.csv"
    with path.open("w") as handle:
        handle.write("id,x,label\n")
        for i in range(rows):
            handle.write(f"{columns['id'][i]},{columns['x'][i]!r},{columns['label'][i]}\n")
    return Written(path, rows)


@pytest.fixture
def jsonl_file(tmp_path: Path) -> Written:
    rows = 20_000
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": f"sample {i}"}) + "\n" for i in range(rows)))
    return Written(path, rows)


@pytest.fixture
def parquet_file(tmp_path: Path) -> Written:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 50_000
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table(table(rows)), path, row_group_size=5_000)
    return Written(path, rows)


@pytest.fixture
def tar_shards(tmp_path: Path) -> Written:
    """Three WebDataset shards of 40 samples, each sample a .jpg-named blob and a .cls label."""
    folder = tmp_path / "shards"
    folder.mkdir()
    for shard in range(3):
        with tarfile.open(folder / f"shard-{shard:04d}.tar", "w") as archive:
            for i in range(40):
                for extension, payload in (("jpg", bytes(range(256)) * 4), ("cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(f"{shard:04d}{i:06d}.{extension}")
                    info.size = len(payload)
                    archive.addfile(info, io.BytesIO(payload))
    return Written(folder, 120)
