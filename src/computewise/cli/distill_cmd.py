"""``computewise distill TEACHER --student SPEC``: a smaller model trained to answer like the teacher, exported."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from computewise.cli.common import EVAL_HELP, JsonOption, bounded_float, bounded_int, print_document, progress_callback

# The flags that take more than a line, one type each, so the verb's signature reads in a screen.
_Student = Annotated[
    str,
    typer.Option(
        "--student",
        help="layers=K: K of the encoder's layers, evenly spaced; width=F: the share F of each hidden "
        "layer's units of an nn.Sequential MLP.",
    ),
]
_Inputs = Annotated[
    Path | None,
    typer.Option(
        help="Unlabelled inputs: sentences (.txt, one per line, or .jsonl with 'text') or arrays (.npz). "
        "Default: the example inputs of an entry point."
    ),
]
_Out = Annotated[
    Path | None, typer.Option(help="Export the student (ONNX Runtime, FP32) and its manifest to this directory.")
]
_EvalSpec = Annotated[
    str, typer.Option("--eval", help=EVAL_HELP + "the teacher (cosine for embeddings, top-1 for classifiers).")
]
_MaxDrop = Annotated[
    str, typer.Option(help="Quality the student may lose against the teacher: 5% (relative) or 0.05 (absolute).")
]
_BatchSize = Annotated[
    int, typer.Option(parser=bounded_int("--batch-size"), help="Examples per training step and per timed batch.")
]
_LearningRate = Annotated[
    float | None,
    typer.Option(
        parser=bounded_float("--learning-rate"),
        help="AdamW's peak rate, after a 6 % warmup and before a linear decay (default 5e-4 encoders, 1e-3 MLPs).",
    ),
]
_HeldOut = Annotated[
    float,
    typer.Option(parser=bounded_float("--held-out"), help="Share of the inputs held aside to grade the student."),
]
_Threads = Annotated[
    int | None, typer.Option(parser=bounded_int("--threads"), help="CPU threads (default: all usable).")
]


def distill(
    teacher: Annotated[str, typer.Argument(help="A Hugging Face encoder directory or package.module:function.")],
    student: _Student,
    inputs: _Inputs = None,
    out: _Out = None,
    eval_spec: _EvalSpec = "agreement",
    max_drop: _MaxDrop = "5%",
    epochs: Annotated[int, typer.Option(parser=bounded_int("--epochs"), help="Passes over the inputs.")] = 10,
    batch_size: _BatchSize = 32,
    learning_rate: _LearningRate = None,
    held_out: _HeldOut = 0.2,
    time_budget: Annotated[str, typer.Option(help="Stop training after this long: 30m, 900s.")] = "30m",
    threads: _Threads = None,
    as_json: JsonOption = False,
) -> None:
    """Train a smaller student on the teacher's answers, grade it as `optimize` does, time both, export it."""
    from computewise.distill.run import DistillOptions
    from computewise.distill.run import distill as run_distill
    from computewise.distill.student import parse_student
    from computewise.optimize.quality import parse_drop
    from computewise.report.distill import print_distill
    from computewise.units import parse_duration_s

    spec = parse_student(student)
    budget = parse_drop(max_drop)
    options = DistillOptions(
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        held_out_fraction=held_out,
        time_budget_s=parse_duration_s(time_budget, "--time-budget"),
        threads=threads,
    )
    stderr = Console(stderr=True)
    with progress_callback("distill", stderr, "loading the teacher") as progress:
        result = run_distill(
            teacher, spec, inputs, out, options, metric_spec=eval_spec, max_drop=budget, progress=progress
        )
    print_document(result, as_json, print_distill)
