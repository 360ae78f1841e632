"""Reference steps: the small GPT of ``examples/tiny_gpt.py`` trained and run through computewise's own code.

A matmul sweep says what the arithmetic units can do; a reference step says what a real training
step reaches, with its layer norms, attention, optimizer update and framework overhead. Both go
into the calibration (``catalog.calibration``): the reference steps give the planner the share of
the measured matmul peak that a whole step reaches, by matmul size, where the sweep alone would
only bound it.

The training step is ``StepEngine.step`` (what ``computewise tune`` and ``fit`` run), the
inference step is the same model's forward under ``torch.no_grad``. FLOPs come from
``estimate.flops`` on the GPT-2 shape of the model (``models.hf_config``), the formula
``estimate train`` uses, so the achieved TFLOP/s and the estimate count the same work: a
calibrated estimate is then exact at the reference shapes by construction, and the question left
is how well it carries to other shapes (``benchmarks/calibration_accuracy.py``).

The example lives in the repository, not in the installed package, so it is imported by entry
point (``examples.tiny_gpt:setup``) from the working directory; elsewhere the reference steps are
skipped and the progress callback says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from computewise.bench.timing import Measured, time_repeats
from computewise.catalog.calibration import equivalent_matmul_size
from computewise.errors import SetupError
from computewise.specs.codec import Jsonable, json_field

__all__ = [
    "REFERENCE_ENTRY_POINT",
    "ReferenceStep",
    "measure_reference_steps",
    "reference_config",
    "tiny_gpt_spec",
]

REFERENCE_ENTRY_POINT = "examples.tiny_gpt:setup"
# tiny_gpt's defaults (2 layers, 64 tokens, batch 32) at three widths; --quick keeps the two narrow ones.
_WIDTHS = (64, 128, 256)
_QUICK_WIDTHS = (64, 128)
_BASE_CONFIG: dict[str, Any] = {"n_layer": 2, "n_head": 2, "block_size": 64, "global_batch": 32, "vocab_size": 512}

StepKind = Literal["train", "infer"]


@dataclass(frozen=True)
class ReferenceStep(Jsonable):
    """One reference step: its median time and what that means in TFLOP/s and MFU.

    ``matmul_size`` is the side of the square matmul with the same FLOPs as the step's typical
    matmul (``equivalent_matmul_size``): the key the calibration interpolates on.
    """

    json_description: ClassVar[str] = (
        "A reference training or inference step of examples/tiny_gpt.py (bench.reference.ReferenceStep)."
    )
    kind: StepKind
    model: str
    width: int = field(metadata=json_field(minimum=1))
    device: str
    dtype: str
    step_s: Measured
    tflops: float
    mfu: float | None
    flops: float  # per step, ``estimate.flops``
    matmul_size: float


def reference_config(width: int) -> dict[str, Any]:
    """tiny_gpt's settings for the reference at ``width`` (enough samples for one global batch)."""
    return {**_BASE_CONFIG, "n_embd": width, "samples": _BASE_CONFIG["global_batch"], "eval_samples": 8}


def tiny_gpt_spec(config: Mapping[str, Any]) -> Any:
    """The ModelSpec of tiny_gpt at ``config``: its GPT-2 shape, read as ``estimate train`` reads a config.json."""
    from computewise.models.hf_config import from_hf_config

    return from_hf_config(
        {
            "model_type": "gpt2",
            "n_layer": int(config["n_layer"]),
            "n_head": int(config["n_head"]),
            "n_embd": int(config["n_embd"]),
            "n_positions": int(config["block_size"]),
            "vocab_size": int(config["vocab_size"]),
            "tie_word_embeddings": True,
        }
    )


def _step_flops(config: Mapping[str, Any], kind: StepKind) -> float:
    """Model FLOPs of one step (the whole global batch) by ``estimate.flops``: 3x forward to train."""
    import numpy as np

    from computewise.estimate.flops import forward_flops_per_token, training_flops_per_token

    spec = tiny_gpt_spec(config)
    seq_len = np.array([float(config["block_size"])])
    if kind == "train":
        per_token = float(training_flops_per_token(spec, seq_len, np.array([0.0]))[0].reshape(-1)[0])
    else:
        per_token = float(forward_flops_per_token(spec, seq_len).reshape(-1)[0])
    return per_token * float(config["block_size"]) * float(config["global_batch"])


def measure_reference_steps(
    device: str,
    peak_flops: float | None,
    *,
    quick: bool,
    progress: Callable[[str], None] | None = None,
) -> tuple[ReferenceStep, ...]:
    """A training and an inference step of tiny_gpt at each width, on ``device`` (``"cpu"``, ``"cuda:0"``).

    ``peak_flops`` is the measured fp32 matmul peak of the device, for MFU (None: MFU is None).
    Each figure is the median of repeats after warm-up, synchronised on GPUs. Returns () when the
    example cannot be imported (bench not run from the repository root), after saying so.
    """
    import torch

    from computewise.train.setup import load_setup

    widths = _QUICK_WIDTHS if quick else _WIDTHS
    warmup, repeats = (2, 5) if quick else (3, 10)
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    results: list[ReferenceStep] = []
    for width in widths:
        config = reference_config(width)
        try:
            setup = load_setup(REFERENCE_ENTRY_POINT, config)
        except SetupError as error:
            if progress is not None:
                progress(f"reference steps skipped: {error.message} (run bench from the repository root)")
            return ()
        for kind in ("train", "infer"):
            if progress is not None:
                progress(f"reference {kind} step, tiny_gpt width {width}")
            seconds = time_repeats(_step_runner(setup, kind, device), warmup=warmup, repeats=repeats, sync=sync)
            step_s = Measured.of(seconds)
            flops = _step_flops(config, kind)
            tflops = flops / step_s.median / 1e12
            results.append(
                ReferenceStep(
                    kind=kind,
                    model=f"tiny_gpt n_layer={config['n_layer']} n_embd={width} seq={config['block_size']} "
                    f"batch={config['global_batch']}",
                    width=width,
                    device=device,
                    dtype="fp32",
                    step_s=step_s,
                    tflops=tflops,
                    mfu=None if not peak_flops else flops / step_s.median / peak_flops,
                    flops=flops,
                    matmul_size=equivalent_matmul_size(
                        float(config["block_size"]) * float(config["global_batch"]), float(width)
                    ),
                )
            )
    return tuple(results)


def _step_runner(setup: Any, kind: StepKind, device: str) -> Callable[[], None]:
    """One training step through ``StepEngine`` (fp32, the whole batch at once), or one forward pass."""
    import torch

    from computewise.train.config import TrainConfig
    from computewise.train.engine import StepEngine

    engine = StepEngine.prepare(setup, TrainConfig(precision="fp32"), device=device)
    indices = range(setup.global_batch_size)
    samples = [setup.dataset[i] for i in indices]
    batch = engine.to_device(tuple(torch.stack(parts) for parts in zip(*samples, strict=True)))
    model = engine.model

    def train() -> None:
        engine.step([batch])

    if kind == "train":
        return train
    inputs = batch[0]

    def forward() -> None:
        model.eval()
        with torch.no_grad():
            model(inputs)

    return forward
