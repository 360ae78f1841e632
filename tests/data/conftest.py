"""The small real datasets of tests/data (written by ``data_files``) as fixtures."""

from data_files import csv_file, jsonl_file, parquet_file, tar_shards

__all__ = ["csv_file", "jsonl_file", "parquet_file", "tar_shards"]
