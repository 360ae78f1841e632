"""``computewise distill``: train a smaller student to answer like the teacher, grade it, time it, export it.

The order of work, and why:

1. The user's inputs are split once (a fixed shuffle) into training inputs and held-aside inputs;
   the student never sees the held-aside ones, which are what it is graded on.
2. The teacher answers the training inputs once; the student is trained on those answers with
   ``computewise.train``'s step engine (``objective`` says which loss for which task).
3. Grading is ``optimize``'s: the same metric (agreement with the teacher, or the user's
   ``fn(predict)``) and the same drop budget, on the held-aside inputs.
4. Speed and export are ``optimize``'s too. Teacher and student each go through one search
   restricted to the same exported variant (ONNX Runtime, FP32, every graph optimisation), so the
   speed-up compares like with like (precision, batching, threads, machine), and the student's
   variant is written with ``optimize.artifact``: ``serve`` runs it, ``optimize`` can quantize it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from computewise.distill.layers import LayerTaps, hidden_state_loss
from computewise.distill.objective import distillation_loss
from computewise.distill.student import Student, StudentSpec, build_student, encoder_layers
from computewise.errors import InputError
from computewise.estimate.quote import Ask, PriceRequest, Quote, quote
from computewise.optimize.feeds import Feed, split_indices
from computewise.optimize.predictors import TorchPredictor, predict_all
from computewise.optimize.quality import DropBudget, Metric, load_metric
from computewise.optimize.search import SearchOptions, SearchResult, run_search
from computewise.optimize.source import ModelSource, load_source
from computewise.specs.codec import Document, Jsonable, json_field, json_property

__all__ = [
    "EXPORTED_VARIANT",
    "DistillOptions",
    "DistillResult",
    "SpeedFigure",
    "distill",
    "epoch_batches",
    "without_dropout",
]

_AT_LEAST_0 = json_field(minimum=0)
_AT_LEAST_1 = json_field(minimum=1)

EXPORTED_VARIANT = "ort-all"  # FP32 ONNX Runtime with every graph optimisation: the teacher's precision
Progress = Callable[[str, int, int], None]
WARMUP_FRACTION = 0.06  # of the planned steps, as in BERT's fine-tuning recipes
LENGTH_WINDOW_BATCHES = 50  # batches sorted by length together; the shuffle happens across windows


@dataclass(frozen=True)
class DistillOptions:
    """How long and how hard to train.

    ``learning_rate`` is the peak of a warmup-then-decay schedule; None picks 5e-4 for encoders, 1e-3
    otherwise. MiniLM to 3 layers, 1,600 sentences, 2 epochs: peaks of 1e-4, 3e-4 and 6e-4 reached
    a mean cosine of 0.853, 0.880 and 0.888 on held-aside text.
    """

    epochs: int = 10
    batch_size: int = 32
    learning_rate: float | None = None
    held_out_fraction: float = 0.2
    time_budget_s: float = 1800.0  # training stops after the step that crosses it
    threads: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class SpeedFigure(Jsonable):
    """Teacher and student at one batch size, both as the exported variant on this machine."""

    batch_size: int = field(metadata=_AT_LEAST_1)
    teacher_items_per_s: float = field(metadata=_AT_LEAST_0)
    student_items_per_s: float = field(metadata=_AT_LEAST_0)
    teacher_p50_ms: float = field(metadata=_AT_LEAST_0)
    student_p50_ms: float = field(metadata=_AT_LEAST_0)

    @json_property(minimum=0)
    def throughput_speedup(self) -> float:
        return self.student_items_per_s / self.teacher_items_per_s

    @json_property(minimum=0)
    def latency_speedup(self) -> float:
        return self.teacher_p50_ms / self.student_p50_ms


@dataclass(frozen=True)
class DistillResult(Jsonable):
    """What ``distill`` did and what came of it: the ``distill --json`` document."""

    json_document: ClassVar[Document] = Document(
        "distill",
        "distill --json",
        "A distillation: the student, how it was trained, its grade against the teacher on held-aside inputs, "
        "both timed as the same exported variant, what it cost (distill.run.DistillResult).",
    )

    teacher: str
    student: str = field(metadata=json_field(description="the --student spec: layers=K or width=F"))
    student_description: str
    task: str = field(metadata=json_field(enum=["embedding", "classifier", "regressor"]))
    teacher_parameters: int = field(metadata=_AT_LEAST_1)
    student_parameters: int = field(metadata=_AT_LEAST_1)
    train_examples: int = field(metadata=_AT_LEAST_1)
    held_out_examples: int = field(metadata=_AT_LEAST_1)
    epochs: int = field(metadata=_AT_LEAST_1)
    steps: int = field(metadata=_AT_LEAST_1)
    train_time_s: float = field(metadata=_AT_LEAST_0)
    first_loss: float
    last_loss: float
    metric: str
    max_drop: str
    teacher_quality: float
    student_quality: float
    student_worst: float | None
    meets_budget: bool
    variant: str = field(
        metadata=json_field(description="the optimize variant both were timed as and the student exported as")
    )
    speeds: tuple[SpeedFigure, ...]
    wall_time_s: float = field(metadata=_AT_LEAST_0)
    # the machine that distilled, as ``estimate.quote`` prices its vCPUs
    usd_per_hour: float = field(metadata=_AT_LEAST_0)
    cost_usd: float = field(metadata=_AT_LEAST_0)  # wall_time_s at usd_per_hour
    price_explanation: str
    exported_to: str | None


def distill(
    teacher_model: str,
    spec: StudentSpec,
    inputs: Path | None,
    out: Path | None,
    options: DistillOptions,
    *,
    metric_spec: str | None = None,
    max_drop: DropBudget,
    progress: Progress | None = None,
) -> DistillResult:
    """Distil ``teacher_model`` (a Hugging Face encoder directory or an entry point) into ``spec``'s student."""
    started = time.perf_counter()
    report = progress or (lambda _what, _done, _total: None)
    teacher = load_source(teacher_model, inputs, None)
    metric = load_metric(metric_spec, teacher.task, max_drop)
    student = build_student(teacher, spec)
    count = len(teacher.feed)
    if count < 10:
        raise InputError(
            f"{count} inputs are too few to distil from: a student needs many more than it has held aside",
            "give --inputs with hundreds or thousands of unlabelled examples",
        )
    train_indices, held_indices = split_indices(count, 1 - options.held_out_fraction, options.seed)
    train_feed, held_feed = teacher.feed.subset(train_indices), teacher.feed.subset(held_indices)
    with _threads(options.threads):
        teacher_predict = TorchPredictor(teacher.module, teacher.positional)
        report("teacher answers", 0, 1)
        targets = predict_all(teacher_predict, train_feed, options.batch_size).astype(np.float32)
        train_started = time.perf_counter()
        steps, epochs, losses = _train(teacher, student, train_feed, targets, options, report)
        train_time_s = time.perf_counter() - train_started
        student.module.eval()
        reference = predict_all(teacher_predict, held_feed, options.batch_size)
        teacher_score, _ = metric.score(teacher_predict, held_feed, reference, options.batch_size)
        student_predict = TorchPredictor(student.module, teacher.positional)
        student_score, _ = metric.score(student_predict, held_feed, reference, options.batch_size)
    meets = metric.meets(student_score, teacher_score.value)
    student_source = replace(
        teacher,
        module=student.module,
        export_module=student.export_module,
        description=f"{teacher.description} distilled to {spec}",
    )
    report("timing teacher and student", 0, 2)
    teacher_search = _exported_variant_search(teacher, metric, options)
    report("timing teacher and student", 1, 2)
    student_search = _exported_variant_search(student_source, metric, options)
    wall_time_s = time.perf_counter() - started
    price = _price(options.threads)
    exported = None
    if out is not None:
        from computewise.optimize.artifact import write_artifact

        variant = student_search.variant(EXPORTED_VARIANT)
        exported = str(write_artifact(student_search, variant, out, forced=not meets))
    return DistillResult(
        teacher=teacher.description,
        student=str(spec),
        student_description=student.description,
        task=teacher.task,
        teacher_parameters=student.teacher_parameters,
        student_parameters=student.student_parameters,
        train_examples=len(train_feed),
        held_out_examples=len(held_feed),
        epochs=epochs,
        steps=steps,
        train_time_s=train_time_s,
        first_loss=losses[0],
        last_loss=losses[-1],
        metric=metric.name,
        max_drop=str(max_drop),
        teacher_quality=teacher_score.value,
        student_quality=student_score.value,
        student_worst=student_score.worst,
        meets_budget=meets,
        variant=EXPORTED_VARIANT,
        speeds=_speeds(teacher_search, student_search),
        wall_time_s=wall_time_s,
        usd_per_hour=price.hourly_usd,
        cost_usd=price.hourly_usd * wall_time_s / 3600,
        price_explanation=price.explanation,
        exported_to=exported,
    )


def _train(
    teacher: ModelSource,
    student: Student,
    feed: Feed,
    targets: np.ndarray,
    options: DistillOptions,
    report: Progress,
) -> tuple[int, int, list[float]]:
    """Epochs of optimizer steps until ``options.epochs`` or the time budget; (steps, epochs, epoch mean losses)."""
    import torch

    from computewise.train.config import TrainConfig
    from computewise.train.engine import StepEngine
    from computewise.train.setup import TrainingSetup

    positional, task = teacher.positional, teacher.task
    rate = options.learning_rate or (5e-4 if teacher.kind == "hf" else 1e-3)
    taps = _layer_taps(teacher, student)

    def forward(model: Any, named: dict[str, Any]) -> Any:
        return model(*named.values()) if positional else model(**named)

    def loss(model: Any, batch: tuple[dict[str, Any], Any]) -> Any:
        named, target = batch
        value = distillation_loss(task, forward(model, named), target)
        if taps is None:
            return value
        with torch.no_grad():
            forward(teacher.module, named)  # its taps keep the hidden states of the layers the student copied
        mine, theirs = taps
        return value + hidden_state_loss(mine.states, theirs.states, named["attention_mask"])

    batch_size = min(options.batch_size, len(feed))
    total = options.epochs * (len(feed) // batch_size)
    setup = TrainingSetup(
        model=student.module,
        loss=loss,
        dataset=list(range(len(feed))),
        global_batch_size=batch_size,
        make_optimizer=lambda parameters, fused: torch.optim.AdamW(parameters, lr=rate, fused=fused or None),
        make_scheduler=lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay(total)),
        seed=options.seed,
    )
    torch.manual_seed(options.seed)
    without_dropout(student.module)
    engine = StepEngine.prepare(setup, TrainConfig(precision="fp32"), device="cpu")
    deadline = time.perf_counter() + options.time_budget_s
    rng = np.random.default_rng(options.seed)
    lengths = feed.lengths()
    steps, losses = 0, []
    with contextlib.ExitStack() as stack:
        for tap in taps or ():
            stack.enter_context(tap)
        for epoch in range(options.epochs):
            epoch_losses = []
            for indices in epoch_batches(len(feed), batch_size, lengths, rng):
                named = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in feed.batch(indices).items()}
                epoch_losses.append(engine.step([(named, torch.from_numpy(targets[indices]))]))
                steps += 1
                report(f"epoch {epoch + 1}/{options.epochs}, loss {epoch_losses[-1]:.4f}", steps, total)
                if time.perf_counter() > deadline:
                    losses.append(float(np.mean(epoch_losses)))
                    return steps, epoch + 1, losses
            losses.append(float(np.mean(epoch_losses)))
    return steps, options.epochs, losses


def without_dropout(module: Any) -> None:
    """Every dropout of the student set to zero, for the whole distillation.

    Dropout guards against fitting noise in labels; the teacher's answers are exact targets, and
    with dropout on, the student chases a randomly thinned copy of itself instead. MiniLM to 3
    layers, 1,600 sentences, 6 epochs: mean held-aside cosine 0.907 with BERT's dropout of 0.1,
    0.915 without (0.913 and 0.922 with hidden-state matching).
    """
    import torch

    for layer in module.modules():
        if isinstance(layer, torch.nn.Dropout):
            layer.p = 0.0


def _layer_taps(teacher: ModelSource, student: Student) -> tuple[LayerTaps, LayerTaps] | None:
    """Taps on each student encoder layer and on the teacher layer it was copied from; None for other students."""
    if not student.teacher_layers:
        return None
    teacher_layers = encoder_layers(teacher.module, teacher.description)
    mine = LayerTaps(encoder_layers(student.module, student.description))
    return mine, LayerTaps([teacher_layers[i] for i in student.teacher_layers])


def epoch_batches(count: int, batch_size: int, lengths: np.ndarray | None, rng: np.random.Generator) -> list[list[int]]:
    """One epoch's full batches in a random order; with lengths, each batch holds sentences of similar length.

    A batch is padded to its longest sentence, so a random mix of 6- and 40-word sentences spends much
    of every step on padding. Sorting windows of 50 batches by length, then shuffling the batches,
    keeps each epoch random while most tokens are real (Hugging Face's ``LengthGroupedSampler`` does
    the same).
    """
    order = rng.permutation(count)
    if lengths is not None:
        window = batch_size * LENGTH_WINDOW_BATCHES
        windows = np.split(order, range(window, count, window))
        order = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")] for chunk in windows])
    batches = [order[start : start + batch_size].tolist() for start in range(0, count - batch_size + 1, batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def warmup_then_decay(total_steps: int, warmup_fraction: float = WARMUP_FRACTION) -> Callable[[int], float]:
    """The rate's multiplier at each step: a linear rise over the first steps, then a linear fall towards 0.

    The student starts from a copy of teacher layers that no longer fit together; full-rate steps at
    the start undo that copy faster than they repair it, and a rate still high at the end leaves the
    student bouncing around the teacher instead of settling on it (BERT's fine-tuning schedule).
    """
    warmup = max(1, round(total_steps * warmup_fraction))

    def multiplier(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return multiplier


def _price(threads: int | None) -> Quote:
    """What the vCPUs that ran the distillation cost per hour: the catalog's CPU price, as ``run`` bills."""
    import os

    from computewise.catalog import load_catalog

    vcpus = threads or len(os.sched_getaffinity(0))
    return quote(load_catalog(), Ask(vcpus=vcpus, why=f"{vcpus} vCPUs distilled"), PriceRequest())


def _exported_variant_search(source: ModelSource, metric: Metric, options: DistillOptions) -> SearchResult:
    """``optimize``'s search of ``source`` restricted to the exported variant: its build, grade and speed."""
    search_options = SearchOptions(
        batch_sizes=(1, options.batch_size), only=(EXPORTED_VARIANT,), threads=options.threads
    )
    result = run_search(source, load_metric(None, metric.task, metric.budget), search_options)
    variant = result.variant(EXPORTED_VARIANT) if any(v.name == EXPORTED_VARIANT for v in result.variants) else None
    if variant is None or variant.status != "ok":
        reason = variant.reason if variant is not None else "not built"
        raise InputError(f"the {EXPORTED_VARIANT} variant of {source.description} failed: {reason}")
    return result


def _speeds(teacher: SearchResult, student: SearchResult) -> tuple[SpeedFigure, ...]:
    figures = []
    for speed in teacher.variant(EXPORTED_VARIANT).speeds:
        mine = student.variant(EXPORTED_VARIANT).speed_at(speed.batch_size)
        if mine is not None:
            figures.append(
                SpeedFigure(speed.batch_size, speed.items_per_s, mine.items_per_s, speed.p50_ms, mine.p50_ms)
            )
    return tuple(figures)


class _threads:
    """torch's intra-op threads set for the block, as ``optimize`` sets them for its sessions."""

    def __init__(self, threads: int | None) -> None:
        self.threads, self.before = threads, 0

    def __enter__(self) -> None:
        import torch

        self.before = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)

    def __exit__(self, *_: object) -> None:
        import torch

        torch.set_num_threads(self.before)
