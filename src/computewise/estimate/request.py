"""``estimate train`` and ``estimate infer`` as one call each: the typed request in, the estimate out.

The CLI reads the flags into a :class:`TrainEstimateRequest` or an :class:`InferEstimateRequest`; a field left
None takes its default here (the data-parallel degree the GPUs leave, the global batch, 20 tokens per
parameter, the accelerator's precision, the framework the layout runs, a request's shape for the kind of
model), and the defaults a reader should know of are stated in the estimate's notes, where it is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from computewise.errors import InputError
from computewise.estimate.layout import default_framework
from computewise.estimate.quote import PriceRequest
from computewise.estimate.single import (
    InferEstimate,
    TrainEstimate,
    default_precision,
    estimate_infer,
    estimate_train,
    input_kind,
)
from computewise.estimate.train import default_global_batch, default_global_batch_note, default_micro_batch
from computewise.limits import TOKENS
from computewise.specs import InferJob, Parallelism, TrainJob
from computewise.specs.finetune import FULL_TRAINING

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.catalog.calibration import Calibration
    from computewise.estimate.assumptions import Assumptions
    from computewise.specs import (
        Accelerator,
        AttentionKernel,
        Execution,
        FineTune,
        Framework,
        GradReduce,
        Loss,
        ModelSpec,
        Optimizer,
        Precision,
        Recompute,
    )

__all__ = [
    "KV_PRECISIONS",
    "InferEstimateRequest",
    "KvPrecision",
    "TrainEstimateRequest",
    "default_seq_len",
    "default_tokens",
    "default_tokens_note",
    "estimate_infer_request",
    "estimate_train_request",
    "refuse_token_flags",
]

# What the KV cache of a model that generates is stored in: two bytes a value, or one for fp8.
KvPrecision = Literal["bf16", "fp16", "fp8"]
KV_PRECISIONS: tuple[KvPrecision, ...] = ("bf16", "fp16", "fp8")
_DEFAULT_PROMPT_TOKENS = 1024
_DEFAULT_OUTPUT_TOKENS = 256


def default_seq_len(model: ModelSpec) -> int:
    """The model's context capped at 4096 tokens; a model without a sequence trains on samples (1)."""
    return min(model.max_seq_len, 4096) if model.is_transformer else 1


_IMAGENET_1K_IMAGES = 1_281_167  # the ILSVRC-2012 training set (Russakovsky et al. 2015)
_CNN_EPOCHS = 90  # the ResNet recipe of torchvision's references and NVIDIA's DeepLearningExamples (Goyal et al. 2017)


def default_tokens(model: ModelSpec) -> float:
    """Training tokens (images for a CNN) when ``--tokens`` is not given.

    20 per parameter for a model with tokens: the compute-optimal ratio of Hoffmann et al. 2022 (Chinchilla).
    A CNN has no tokens and no such law: 20 images per parameter would be 511M images for ResNet-50, four
    times its recipe, so it takes 90 epochs of ImageNet-1k, as its published recipes train it.
    """
    if model.architecture == "cnn":
        return float(_CNN_EPOCHS * _IMAGENET_1K_IMAGES)
    tokens = 20.0 * model.params
    if tokens > TOKENS.high:  # the default must not fail a range check on a flag the user never gave
        raise InputError(
            f"--tokens not given, and 20 tokens per parameter (Chinchilla-optimal) of {model.name} would be "
            f"{tokens:.3g}, over the {TOKENS.high:g} a training run can take ({TOKENS.why})",
            "give --tokens, e.g. --tokens 10T",
        )
    return tokens


def default_tokens_note(model: ModelSpec, tokens: float) -> str:
    """How the output states ``default_tokens``, so a reader knows the length the time and cost assume."""
    if model.architecture == "cnn":
        return f"--tokens not given: {_CNN_EPOCHS} epochs of ImageNet-1k ({tokens:.3g} images), the ResNet recipe"
    return f"--tokens not given: 20 tokens per parameter ({tokens:.3g}), Chinchilla-optimal"


@dataclass(frozen=True)
class TrainEstimateRequest:
    """What ``estimate train`` is asked; a None field takes its default, and a note says which ones a reader
    needs to know (the global batch and the tokens, which set the time and the cost)."""

    model: ModelSpec
    accelerator: Accelerator
    gpus: int
    layout: Parallelism  # every degree but dp, which the GPUs leave: gpus / (tp * pp * cp)
    seq_len: int
    micro_batch: int | None = None  # None: default_micro_batch (1, or an image model's share of the batch)
    tokens: float | None = None  # None: default_tokens
    global_batch: int | None = None  # None: default_global_batch, a multiple of dp x micro_batch
    precision: Precision | None = None  # None: the accelerator's default_precision
    optimizer: Optimizer = "adamw"
    recompute: Recompute = "none"
    attention: AttentionKernel = "flash"
    framework: Framework | None = None  # None: default_framework of the layout and the fine-tuning
    execution: Execution = "eager"
    finetune: FineTune = FULL_TRAINING
    loss: Loss = "standard"
    grad_reduce: GradReduce = "auto"
    price: PriceRequest = field(default_factory=PriceRequest)
    utilization: float | None = None  # --mfu; else the calibration's, else the assumed efficiency
    calibration: Calibration | None = None  # what bench measured on this accelerator

    def parallelism(self) -> Parallelism:
        """The layout with dp = gpus / (tp * pp * cp), refused where that is not whole."""
        split = self.layout.tp * self.layout.pp * self.layout.cp
        if self.gpus % split:
            raise InputError(
                f"tp*pp*cp = {split} does not divide --gpus {self.gpus}, so dp = gpus/(tp*pp*cp) is not whole",
                "choose --tp, --pp and --cp whose product divides --gpus",
            )
        return replace(self.layout, dp=self.gpus // split)


def estimate_train_request(request: TrainEstimateRequest, catalog: Catalog, assumptions: Assumptions) -> TrainEstimate:
    """The estimate of ``request`` with its defaults filled in, and the notes that state them."""
    parallelism = request.parallelism()
    model, seq = request.model, request.seq_len
    price = request.price

    def at(micro_batch: int) -> tuple[TrainJob, TrainEstimate]:
        job = TrainJob(
            tokens=default_tokens(model) if request.tokens is None else request.tokens,
            seq_len=seq,
            micro_batch=micro_batch,
            global_batch=request.global_batch
            or default_global_batch(
                seq, model.params, step_multiple=parallelism.dp * micro_batch, architecture=model.architecture
            ),
            precision=request.precision or default_precision(request.accelerator),
            optimizer=request.optimizer,
            recompute=request.recompute,
            attention=request.attention,
            framework=request.framework or default_framework(parallelism, request.finetune),
            execution=request.execution,
            finetune=request.finetune,
            loss=request.loss,
            grad_reduce=request.grad_reduce,
        )
        estimate = estimate_train(
            model,
            request.accelerator,
            request.gpus,
            job,
            parallelism,
            catalog,
            assumptions,
            pricing=price.pricing,
            cloud=price.cloud,
            region=price.region,
            instance_type=price.instance_type,
            utilization=request.utilization,
            calibration=request.calibration,
        )
        return job, estimate

    micro_batch = request.micro_batch or default_micro_batch(model.architecture, parallelism.dp, request.global_batch)
    job, estimate = at(micro_batch)
    # A default image micro-batch too large for the device is halved (it still divides the rank's share) until it fits.
    while request.micro_batch is None and not estimate.fits and micro_batch % 2 == 0:
        micro_batch //= 2
        job, estimate = at(micro_batch)
    given_batch = request.global_batch is not None
    defaults = [] if given_batch else [default_global_batch_note(job.global_batch, seq, model.architecture)]
    if request.micro_batch is None and micro_batch > 1:
        defaults.append(
            f"micro-batch {micro_batch} images per device (default for an image model: its share of the global "
            "batch, at most 256 and halved until it fits, so no step waits on the host); set --micro-batch to "
            "change it"
        )
    if request.tokens is None:
        defaults.append(default_tokens_note(model, job.tokens))
    return replace(
        estimate, notes=(*estimate.notes, *defaults, *beyond_positions_note(model, seq, f"--seq-len {seq:,}"))
    )


@dataclass(frozen=True)
class InferEstimateRequest:
    """What ``estimate infer`` is asked; a None field takes its default for the kind of model
    (``single.input_kind``): a prompt and an output for a model that generates, one input for one that does not."""

    model: ModelSpec
    accelerator: Accelerator
    tp: int = 1  # accelerators per replica (--gpus)
    batch: int = 1
    input_len: int | None = None  # None: a 1024-token prompt (less where the output overflows), or default_seq_len
    output_len: int | None = None  # None: 256 tokens generated
    kv_precision: KvPrecision | None = None  # None: bf16
    precision: Precision | None = None  # None: the accelerator's default_precision
    framework: Framework = "pytorch"
    execution: Execution = "eager"
    price: PriceRequest = field(default_factory=PriceRequest)


def estimate_infer_request(request: InferEstimateRequest, catalog: Catalog, assumptions: Assumptions) -> InferEstimate:
    """The estimate of one replica serving ``request``'s batches, its shape filled in for the kind of model."""
    if request.tp < 1:
        raise InputError(f"--gpus must be at least 1, got {request.tp}", "use --gpus 1 for one device per replica")
    input_len, generated, kv_bytes = _request_shape(request)
    job = InferJob(
        batch=request.batch,
        context_len=input_len,
        output_len=generated,
        precision=request.precision or default_precision(request.accelerator),
        kv_cache_bytes_per_value=kv_bytes,
        framework=request.framework,
        execution=request.execution,
    )
    price = request.price
    estimate = estimate_infer(
        request.model,
        request.accelerator,
        job,
        catalog,
        assumptions,
        tp=request.tp,
        pricing=price.pricing,
        cloud=price.cloud,
        region=price.region,
        instance_type=price.instance_type,
    )
    span = input_len + generated
    asked = f"a {span:,}-token prompt and output" if generated else f"a {span:,}-token input"
    beyond = beyond_positions_note(request.model, span, asked)
    return replace(estimate, notes=(*estimate.notes, *beyond))


def beyond_positions_note(model: ModelSpec, tokens: int, what: str) -> tuple[str, ...]:
    """A sequence longer than the model's position table: one note, since the model decides whether it runs
    (learned positions cannot, rotary ones only with their context extended) and the estimate times it as asked."""
    if not model.is_transformer or tokens <= model.max_seq_len:
        return ()
    return (
        f"{what} exceeds the {model.max_seq_len:,} positions {model.name} was built for: a model "
        "with learned positions cannot run it, a rotary one only with its context extended (RoPE scaling, then "
        "fine-tuning); the figures are for the length asked",
    )


def _request_shape(request: InferEstimateRequest) -> tuple[int, int, float]:
    """(tokens per input, generated tokens, KV-cache bytes per value) of one request.

    A model that generates reads a prompt and writes tokens into its KV cache. An image or encoder
    model answers each input in one forward pass: it has no output and no cache, and an image's
    tokens are fixed by its size, so flags that would change them are refused rather than ignored.
    """
    spec, input_len, output_len = request.model, request.input_len, request.output_len
    kind = input_kind(spec)
    if kind is None:
        generated = _DEFAULT_OUTPUT_TOKENS if output_len is None else output_len
        # The default prompt leaves room for the output in the model's context (GPT-2's 1024 positions: 768).
        room = max(spec.max_seq_len - generated, 1)
        input_tokens = min(_DEFAULT_PROMPT_TOKENS, room) if input_len is None else input_len
        return input_tokens, generated, 1.0 if request.kv_precision == "fp8" else 2.0
    refuse_token_flags(spec, input_len, output_len, request.kv_precision)
    return (default_seq_len(spec) if input_len is None else input_len), 0, 2.0


def refuse_token_flags(
    spec: ModelSpec,
    input_len: int | None,
    output_len: int | None,
    kv_precision: str | None = None,
    batched: bool = True,
) -> None:
    """Refuse the flags of generated tokens (and an image's length) for a model that generates none, which would
    otherwise be ignored: its input is answered in one forward pass, and an image's tokens are fixed by its size.
    ``batched``: the command takes --batch (``estimate infer``; ``plan infer`` chooses the batch itself)."""
    kind = input_kind(spec)
    if kind is None:
        return
    given = [
        flag
        for flag, value in (
            ("--input-len/--context-len", None if kind == "sequences" else input_len),
            ("--output-len", output_len),
            ("--kv-precision", kv_precision),
        )
        if value is not None
    ]
    if given:
        raise InputError(
            f"{spec.name} is {'an' if spec.architecture[0] in 'aeiou' else 'a'} {spec.architecture} model: it reads "
            f"{kind}, a batch in one forward pass, and generates no tokens, so {' and '.join(given)} "
            f"{'does' if len(given) == 1 else 'do'} not apply",
            f"leave out {' and '.join(given)}"
            + (f"; --batch sets the {kind} per batch" if batched else "")
            + ("; --input-len sets the tokens per sequence" if kind == "sequences" else ""),
        )
