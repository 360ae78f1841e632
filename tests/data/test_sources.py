"""Each format cut into parts and read back: every row once, every byte of the file counted once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from data_files import Written

from computewise.data.sources import is_entry_point, open_source, read_part
from computewise.errors import InputError


def read_all(text: str, **kwargs: object) -> tuple[int, int, list[object]]:
    source = open_source(text, **kwargs)  # type: ignore[arg-type]
    rows = size = 0
    payloads: list[object] = []
    for part in source.parts:
        for count, read, payload in read_part(part, 1000):
            rows += count
            size += read
            payloads.append(payload)
    return rows, size, payloads


def test_csv_split_on_line_ends_reads_every_row_once(csv_file: Written) -> None:
    source = open_source(str(csv_file.path))
    assert len(source.parts) > 1  # the file really is split among parts
    rows, size, payloads = read_all(str(csv_file.path))
    assert rows == csv_file.rows
    assert size == csv_file.path.stat().st_size
    ids = np.concatenate([p["id"] for p in payloads])  # type: ignore[index]
    assert np.array_equal(np.sort(ids), np.arange(csv_file.rows))  # no row lost or read twice at a boundary


def test_jsonl_and_parquet_count_what_was_written(jsonl_file: Written, parquet_file: Written) -> None:
    rows, size, _ = read_all(str(jsonl_file.path))
    assert (rows, size) == (jsonl_file.rows, jsonl_file.path.stat().st_size)
    source = open_source(str(parquet_file.path))
    assert source.rows == parquet_file.rows and len(source.parts) == 10  # one part per row group
    assert read_all(str(parquet_file.path))[0] == parquet_file.rows


def test_token_npy_is_read_in_seq_len_windows(tmp_path: Path) -> None:
    tokens = np.arange(10_000, dtype=np.uint16)
    np.save(tmp_path / "tokens.npy", tokens)
    rows, size, payloads = read_all(str(tmp_path / "tokens.npy"), seq_len=128)
    assert rows == 10_000 // 128 and size == rows * 128 * 2
    first = payloads[0]
    assert isinstance(first, np.ndarray) and first.shape[1] == 128 and np.array_equal(first[1], tokens[128:256])


def test_a_headerless_bin_token_file_is_read_like_nanogpt_memory_maps_it(tmp_path: Path) -> None:
    tokens = np.arange(5_000, dtype=np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    rows, size, payloads = read_all(str(tmp_path / "train.bin"), seq_len=100)
    assert rows == 50 and size == tokens.nbytes
    assert np.array_equal(np.concatenate(payloads).ravel(), tokens)  # type: ignore[arg-type]
    as_int32 = open_source(str(tmp_path / "train.bin"), seq_len=100, token_dtype="int32")
    assert as_int32.rows == 25  # the same bytes read as 4-byte tokens


def test_webdataset_shards_group_members_by_key(tar_shards: Written) -> None:
    rows, _size, payloads = read_all(str(tar_shards.path))
    assert rows == tar_shards.rows
    sample = payloads[0][0]  # type: ignore[index]
    assert set(sample) == {"jpg", "cls"}


def test_a_folder_of_images_is_one_sample_per_file(tmp_path: Path) -> None:
    for i in range(70):
        (tmp_path / f"{i}.png").write_bytes(b"\x89PNG fake " + bytes(i))
    source = open_source(str(tmp_path), forced_format="images")
    assert source.rows == 70 and len(source.parts) == 2


def test_entry_points_and_paths_are_told_apart() -> None:
    assert is_entry_point("my_pkg.loaders:make_loader")
    assert not is_entry_point("s3://bucket/train.parquet")
    assert not is_entry_point("data/train.csv")


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("missing.parquet", None, "no such file"),
        ("notes.docx", b"hello", "unknown data format"),
        ("empty.csv", b"", "empty"),
        ("header.csv", b"a,b\n", "no samples"),
    ],
)
def test_bad_sources_say_what_to_do(tmp_path: Path, name: str, content: bytes | None, match: str) -> None:
    if content is not None:
        (tmp_path / name).write_bytes(content)
    with pytest.raises(InputError, match=match) as caught:
        open_source(str(tmp_path / name))
    assert caught.value.hint
