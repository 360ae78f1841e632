"""ModelSpec: the shape of a model, as much as the estimators need and no more."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Architecture", "ModelSpec", "TracedKernels", "TracedStats"]

Architecture = Literal["decoder", "encoder", "encoder-decoder", "vision-transformer", "cnn", "generic"]


@dataclass(frozen=True)
class TracedKernels:
    """The kernels an eager step of a traced network launches, and the bytes they move.

    A CNN's step is not its convolutions alone: each convolution is followed by a norm, an activation
    and often a residual add, kernels that move whole activation tensors for a handful of FLOPs. The
    trace counts, for every kernel the eager code launches (views excluded), the bytes of the tensors
    it reads and writes, weights and their gradients excluded (they do not grow with the batch).
    "GEMM" kernels are those with FLOPs (convolutions, matmuls, attention); "other" is the rest.
    Bytes are per sample at the traced dtype; kernel counts are per step, whatever the batch.
    """

    eval_kernels: int  # an inference forward (eval mode, no autograd)
    train_forward_kernels: int  # a training forward (batch-norm statistics updated, autograd recording)
    train_backward_kernels: int
    convolutions: int  # cuDNN calls in a forward, each with host work of its own
    eval_gemm_bytes_per_sample: float
    eval_other_bytes_per_sample: float
    eval_peak_bytes_per_sample: float  # the most activation bytes an inference forward holds at once
    train_gemm_bytes_per_sample: float  # forward and backward
    train_other_bytes_per_sample: float  # forward and backward


@dataclass(frozen=True)
class TracedStats:
    """What a trace of a real ``nn.Module`` measured, per sample of the example input.

    These replace the transformer formulas when present: a CNN or an unusual block has no
    closed form, but its trace is exact.
    """

    forward_flops_per_sample: float
    activation_bytes_per_sample: float  # tensors autograd saves for backward, at the traced dtype
    param_bytes: int  # at the traced dtype
    traced_dtype_bytes: int = 4
    kernels: TracedKernels | None = None  # None: not measured (the step is then timed by its FLOPs alone)


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a model. Transformer fields are zero for models without them (CNNs).

    ``params`` is the exact total parameter count when known (preset, config.json, trace).
    ``ffn_size`` is the inner size of one expert's MLP; ``gated_ffn`` means three matrices
    (SwiGLU/GeGLU) instead of two. ``experts``/``active_experts`` describe MoE layers
    (1/1 for dense models). ``sliding_window`` caps attention span and KV cache (None: full).
    ``model_type`` is the Hugging Face ``model_type`` the shape was read as ("" for a shape with no
    Hugging Face model: a parameter count, a trace, GPT-3): the shape alone does not say what a family
    names its modules or whether it fuses q, k and v, which LoRA's targets depend on.
    ``activation`` is the MLP's activation as transformers names it (``hidden_act``,
    ``activation_function``: "gelu_new", "silu"; "" when unknown): some of transformers' activations
    are Python compositions of several ops, each keeping a tensor for the backward.
    """

    name: str
    params: int
    architecture: Architecture = "decoder"
    layers: int = 0
    hidden_size: int = 0
    heads: int = 0
    kv_heads: int = 0
    ffn_size: int = 0
    vocab_size: int = 0
    tied_embeddings: bool = False
    gated_ffn: bool = False
    experts: int = 1
    active_experts: int = 1
    sliding_window: int | None = None
    max_seq_len: int = 2048
    head_dim: int = 0  # 0: hidden_size // heads
    decoder_layers: int = 0  # encoder-decoder models: layers is the encoder, this the decoder
    image_size: int = 0  # vision models: input side in pixels
    patch_size: int = 0
    shape_inferred: bool = False  # True when only a parameter count was given
    traced: TracedStats | None = None
    source: str = ""
    model_type: str = ""
    activation: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_transformer(self) -> bool:
        return self.layers > 0 and self.hidden_size > 0 and self.heads > 0

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or (self.hidden_size // self.heads if self.heads else 0)

    @property
    def total_layers(self) -> int:
        return self.layers + self.decoder_layers

    @property
    def active_params(self) -> float:
        """Parameters touched per token: MoE layers use ``active_experts`` of ``experts``."""
        if self.experts <= 1 or not self.is_transformer:
            return float(self.params)
        per_expert = (3 if self.gated_ffn else 2) * self.hidden_size * self.ffn_size
        inactive = (self.experts - self.active_experts) * per_expert * self.total_layers
        return float(self.params - inactive)

    @property
    def embedding_params(self) -> int:
        """Input embedding plus an untied LM head (accelerate's estimator misses the latter)."""
        copies = 1 if self.tied_embeddings else 2
        if self.architecture not in ("decoder", "encoder-decoder"):
            copies = 1
        return copies * self.vocab_size * self.hidden_size
