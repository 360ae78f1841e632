"""``computewise data``: how fast an input pipeline feeds the GPUs it must keep busy, and what to change.

Nothing heavy is imported here: pyarrow, fsspec and torch are imported inside the functions that
read a format, a URL or run a DataLoader.
"""

from computewise.data.bench import BenchOptions, run_data_bench
from computewise.data.convert import ConvertResult, convert
from computewise.data.result import Advice, DataBenchResult, Demand, Measurement, Verdict
from computewise.data.sources import Source, open_source

__all__ = [
    "Advice",
    "BenchOptions",
    "ConvertResult",
    "DataBenchResult",
    "Demand",
    "Measurement",
    "Source",
    "Verdict",
    "convert",
    "open_source",
    "run_data_bench",
]
