"""Replay every published ResNet-50 figure in ``data/published_cnn_runs.csv`` through the estimator.

Why
---
A traced network (a CNN) has no transformer formula: its step is the kernels its trace counted, each by
its roofline, plus the host's launches (``estimate/traced.py``). Those rows check that model where users
see it: images/s of inference and training, and the eager latency at batch 1, on T4, V100 and A100, from
NVIDIA's DeepLearningExamples and Hugging Face's torch.compile guide. No constant is fitted to them.

Each row is one published figure with the configuration it ran; ``known_miss`` says, for a row the
estimate misses by more than 25 %, what the estimate does not model (a slower host, TF32, a T4's clock).
The script prints every row and its error, the median |error| of the rows without a known miss, and
fails when a row misses by more than 25 % without a stated cause, or when a stated cause no longer
applies (the row is now within 25 %): both mean the table and the model have drifted apart.

Usage
-----
    python benchmarks/replay_cnn.py           # the table
    python benchmarks/replay_cnn.py --json    # rows as JSON
Exit status: 0, or 1 when a row and its ``known_miss`` disagree.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from computewise.catalog import load_catalog
from computewise.estimate import Assumptions
from computewise.estimate.single import estimate_infer, estimate_train
from computewise.models.presets import preset
from computewise.specs import InferJob, Parallelism, TrainJob

ROWS_FILE = Path(__file__).resolve().parent / "data" / "published_cnn_runs.csv"
TOLERANCE = 0.25  # issue 26: published runs within 25 %


@dataclass(frozen=True)
class Replayed:
    name: str
    metric: str
    published: float
    estimated: float
    known_miss: str

    @property
    def error(self) -> float:
        """Estimated over published, minus one: positive is optimistic for a rate, pessimistic for a latency."""
        return self.estimated / self.published - 1.0

    @property
    def consistent(self) -> bool:
        """A miss has a stated cause, and a stated cause has a miss."""
        return (abs(self.error) > TOLERANCE) == bool(self.known_miss)


def replay(path: Path = ROWS_FILE) -> list[Replayed]:
    """Every row of ``path``, estimated by ``estimate_infer`` or ``estimate_train`` as the CLI would."""
    catalog = load_catalog()
    assumptions = Assumptions.from_catalog(catalog)
    model = preset("resnet-50")
    replayed = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            accelerator = catalog.accelerator(row["accelerator"])
            batch = int(row["batch"])
            if row["mode"] == "infer":
                job = InferJob(
                    batch=batch,
                    context_len=1,
                    output_len=0,
                    precision=row["precision"],  # type: ignore[arg-type]
                    framework=row["framework"],  # type: ignore[arg-type]
                )
                images_per_s = estimate_infer(model, accelerator, job, catalog, assumptions).requests_per_second
            else:
                train = TrainJob(
                    tokens=1_281_167,  # one ImageNet epoch: the rate does not depend on it
                    seq_len=1,
                    micro_batch=batch,
                    global_batch=batch,
                    precision=row["precision"],  # type: ignore[arg-type]
                )
                estimate = estimate_train(model, accelerator, 1, train, Parallelism(), catalog, assumptions)
                images_per_s = estimate.tokens_per_second
            estimated = 1000.0 * batch / images_per_s if row["metric"] == "latency_ms" else images_per_s
            replayed.append(Replayed(row["name"], row["metric"], float(row["published"]), estimated, row["known_miss"]))
    return replayed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = replay()
    if args.json:
        print(json.dumps([{**asdict(row), "error": row.error} for row in rows], indent=2))
    else:
        for row in rows:
            flag = "" if row.consistent else "  <- disagrees with known_miss"
            cause = f"  ({row.known_miss})" if row.known_miss else ""
            print(
                f"{row.name:34} {row.metric:12} published {row.published:9,.1f} estimated {row.estimated:9,.1f}"
                f" {row.error:+6.0%}{cause}{flag}"
            )
        checked = [abs(row.error) for row in rows if not row.known_miss]
        print(
            f"{len(checked)} of {len(rows)} rows without a known miss: median |error| {statistics.median(checked):.0%},"
            f" worst {max(checked):.0%} (target: each within {TOLERANCE:.0%})"
        )
    return 0 if all(row.consistent for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
