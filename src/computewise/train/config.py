"""``TrainConfig``: the settings that change how fast a model trains, not what it learns.

One frozen value carries them from ``computewise tune`` (which writes the fastest one to a JSON
file) to ``computewise.train`` (which reads it back), so the tuned configuration and the one a run
uses cannot drift apart. What the model learns is fixed by the training setup's global batch;
the micro-batch only decides how that batch is split into accumulation steps.

Contradictions are refused when the value is built, naming both settings, because a run that
starts with them would fail (or silently ignore one) minutes later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Final, Literal, Self, get_args

from computewise.errors import ConfigError
from computewise.specs.codec import Document, Jsonable, json_field, json_property
from computewise.specs.document import check_schema_version
from computewise.system.files import write_text_atomic

__all__ = [
    "CONFIG_FORMAT",
    "CompileMode",
    "ConfigFile",
    "PrecisionChoice",
    "TrainConfig",
    "load_config",
    "write_config",
]

PrecisionChoice = Literal["auto", "fp32", "tf32", "bf16", "fp16"]
# ``torch.compile``'s modes: reduce-overhead records CUDA graphs (one launch replays a whole step's
# kernels), max-autotune benchmarks kernel choices while compiling (and records CUDA graphs too).
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
# The file format tag: a file written by a newer computewise with another layout is refused, not misread.
CONFIG_FORMAT: Final = "computewise.train-config/1"


@dataclass(frozen=True)
class TrainConfig(Jsonable):
    """How to run the steps: precision, batch split, memory savers, compilation, data loading.

    ``micro_batch_size`` None means the whole global batch in one step (no accumulation).
    ``loader_workers`` 0 loads in the training process; ``prefetch_factor`` and
    ``persistent_workers`` only mean something with workers, so asking for them without is an error.
    ``compile_mode`` is the mode ``torch.compile`` is given, so it needs ``compile``; so does
    ``compile_loss``, which compiles the setup's loss function, model call included, as one graph
    instead of the model alone: Inductor can then fuse the cross-entropy over the logits (eager's
    log-softmax reads and writes every FP32 logit several times; on GPT-2 124M that is about 40 GB
    more a step at 64 x 1024 tokens), which it cannot across the compiled model's boundary.
    """

    json_description: ClassVar[str] = "A training configuration (train.config.TrainConfig)."
    # A key that is not a setting is refused (from_dict), so a typo is never silently ignored.
    json_constraints: ClassVar[dict[str, object]] = {"additionalProperties": False}

    precision: PrecisionChoice = "auto"
    micro_batch_size: int | None = field(
        default=None, metadata=json_field(minimum=1, description="Samples per step; null: the whole global batch.")
    )
    activation_checkpointing: bool = False
    compile: bool = False
    channels_last: bool = False
    fused_optimizer: bool = False
    loader_workers: int = field(
        default=0, metadata=json_field(minimum=0, description="Loader processes; 0 loads in the training process.")
    )
    pin_memory: bool = False
    prefetch_factor: int | None = field(default=None, metadata=json_field(minimum=1))
    persistent_workers: bool = False
    grad_clip_norm: float | None = field(default=None, metadata=json_field(exclusive_minimum=0))
    compile_mode: CompileMode = field(default="default", metadata=json_field(written=False))
    compile_loss: bool = field(default=False, metadata=json_field(written=False))

    def __post_init__(self) -> None:
        if self.precision not in get_args(PrecisionChoice):
            raise ConfigError(
                f"unknown precision {self.precision!r}", f"choose one of {', '.join(get_args(PrecisionChoice))}"
            )
        if self.compile_mode not in get_args(CompileMode):
            raise ConfigError(
                f"unknown compile_mode {self.compile_mode!r}", f"choose one of {', '.join(get_args(CompileMode))}"
            )
        if self.compile_mode != "default" and not self.compile:
            raise ConfigError(
                f"compile_mode={self.compile_mode} contradicts compile=False: the mode is torch.compile's",
                "set compile=True or drop compile_mode",
            )
        if self.compile_loss and not self.compile:
            raise ConfigError(
                "compile_loss=True contradicts compile=False: it widens what torch.compile compiles",
                "set compile=True or drop compile_loss",
            )
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ConfigError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.loader_workers < 0:
            raise ConfigError(f"loader_workers must be >= 0, got {self.loader_workers}")
        if self.loader_workers == 0 and self.prefetch_factor is not None:
            raise ConfigError(
                "prefetch_factor contradicts loader_workers=0: prefetching needs worker processes",
                "set loader_workers >= 1 or drop prefetch_factor",
            )
        if self.loader_workers == 0 and self.persistent_workers:
            raise ConfigError(
                "persistent_workers contradicts loader_workers=0: there are no workers to keep",
                "set loader_workers >= 1 or drop persistent_workers",
            )
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ConfigError(f"prefetch_factor must be >= 1, got {self.prefetch_factor}")
        if self.grad_clip_norm is not None and not self.grad_clip_norm > 0:
            raise ConfigError(f"grad_clip_norm must be > 0, got {self.grad_clip_norm}")

    def accumulation_steps(self, global_batch_size: int) -> int:
        """Micro-batches per optimizer step; the micro-batch must divide the global batch exactly.

        An uneven split would change the effective batch (and so what the model learns), which a
        speed setting must never do.
        """
        micro = self.micro_batch_size or global_batch_size
        if micro > global_batch_size or global_batch_size % micro:
            raise ConfigError(
                f"micro_batch_size {micro} does not divide the global batch {global_batch_size}",
                "pick a micro-batch that divides the global batch, so accumulation keeps it fixed",
            )
        return global_batch_size // micro

    @property
    def cuda_graphs(self) -> bool:
        """Whether compilation records CUDA graphs (reduce-overhead and max-autotune do)."""
        return self.compile and self.compile_mode in ("reduce-overhead", "max-autotune")

    @json_property(
        name="compile_mode",
        omit_empty=True,
        description="torch.compile's mode; written only when not the default (reduce-overhead and "
        "max-autotune record CUDA graphs).",
    )
    def written_compile_mode(self) -> CompileMode | None:
        """``compile_mode`` only when not the default, so files without one stay readable by earlier
        versions (their format has no such key)."""
        return None if self.compile_mode == "default" else self.compile_mode

    @json_property(
        name="compile_loss",
        omit_empty=True,
        description="Whether torch.compile compiles the loss function with the model, so the cross-entropy fuses; "
        "written only when true.",
    )
    def written_compile_loss(self) -> bool | None:
        """``compile_loss`` only when set, so files without it stay readable by earlier versions."""
        return True if self.compile_loss else None

    @classmethod
    def from_dict(cls, data: object, source: str = "") -> Self:
        """Read every setting's type, and refuse a key that is no setting (a typo must not be ignored)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known) if isinstance(data, Mapping) else []
        if unknown:
            raise ConfigError(
                f"unknown training setting(s): {', '.join(unknown)}", f"known settings: {', '.join(sorted(known))}"
            )
        return super().from_dict(data, source)

    def describe(self) -> str:
        """One line naming only what differs from the defaults, for tables and progress bars."""
        default = TrainConfig()
        parts = [
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        ]
        return ", ".join(parts) or "defaults"


@dataclass(frozen=True, kw_only=True)
class ConfigFile(Jsonable):
    """The file ``write_config`` writes and ``load_config`` reads: a configuration, tagged with its format so
    that a file of another layout is refused, not misread, and the entry point it was tuned for.

    ``tune --out`` writes a ``tune.savings.TunedConfigFile``, which adds what the search measured.
    """

    json_document: ClassVar[Document | None] = Document(
        "tune-config",
        "tune --out FILE",
        "The tuned training configuration, read by computewise.train.load_config (and `scaletest --train-config`).",
    )

    format: Literal["computewise.train-config/1"] = field(
        default=CONFIG_FORMAT, metadata=json_field(description="The file's layout; another one is refused by name.")
    )
    config: TrainConfig
    entry: str | None = field(
        default=None, metadata=json_field(omit_empty=True, description="The entry point (module:function) tuned.")
    )


def write_config(config: TrainConfig | ConfigFile, path: Path, *, entry: str | None = None) -> None:
    """Write ``config`` atomically as JSON: a configuration (and the ``entry`` point it is for), or a whole
    file such as the one ``tune --out`` writes with its measurements."""
    document = config if isinstance(config, ConfigFile) else ConfigFile(config=config, entry=entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(document.to_dict(), indent=2))


def load_config(path: Path | str) -> TrainConfig:
    """Read a configuration written by ``write_config`` (``computewise tune ENTRY --out FILE``)."""
    path = Path(path)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as failure:
        raise ConfigError(f"no training configuration at {path}", "run `computewise tune ... --out FILE`") from failure
    except (OSError, json.JSONDecodeError) as failure:
        raise ConfigError(f"cannot read training configuration {path}: {failure}") from failure
    if isinstance(payload, dict):  # a newer layout is named as such before its format tag is compared
        check_schema_version(payload, "`computewise tune ENTRY --out FILE`", str(path))
    if (
        not isinstance(payload, dict)
        or payload.get("format") != CONFIG_FORMAT
        or not isinstance(payload.get("config"), dict)
    ):
        raise ConfigError(
            f"{path} is not a computewise training configuration (expected format {CONFIG_FORMAT!r})",
            "write it with `computewise tune ENTRY --out FILE` or computewise.train.write_config",
        )
    return TrainConfig.from_dict(payload["config"], str(path))
