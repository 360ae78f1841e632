"""What LoRA and QLoRA change in a training step: frozen base weights, small trained adapters.

A LoRA step (Hu et al. 2021, arXiv:2106.09685) as PEFT runs it on a Hugging Face model differs from
full training in four ways the estimator needs:

- **State.** The base is frozen at its storage precision: 16 bits as users load it
  (``torch_dtype=bfloat16``), or for QLoRA (Dettmers et al. 2023, arXiv:2305.14314) every linear
  layer of the blocks in 4 bits as bitsandbytes stores it (``estimate.quantized``) and the rest
  (embeddings, norms, the LM head) in fp32, because ``peft.prepare_model_for_kbit_training`` (which
  TRL's SFTTrainer and the QLoRA scripts call) upcasts every parameter it did not quantize. Only the
  adapters (fp32 by default: PEFT's ``autocast_adapter_dtype``) and any ``modules_to_save`` have
  gradients and optimizer states, at their own width: no master copy. Autocast caches a 16-bit copy
  of each fp32 adapter; under QLoRA it also casts the fp32 LM head for its matmul and autograd keeps
  that copy for the input gradient, and one base matrix at a time is dequantized to bf16.
- **Activations** stay almost as large as in full training: the frozen layers still pass gradients
  to the adapters below them, so norms, attention, the MLP's activation and product keep what they
  keep. What goes: the frozen norm weights' ``weight * x`` no longer saves the normalised input, and
  a frozen linear layer saves nothing (autograd saves an input only for a weight that needs a
  gradient). What comes: each adapted layer keeps its own 16-bit copy of its input (PEFT casts the
  input to the adapter's fp32 and autocast casts it back for the matmul, a new tensor every time)
  and ``lora_B`` keeps ``lora_A``'s rank-wide output. The residual stream is at the base's width:
  16 bits for LoRA, fp32 for QLoRA (its embedding was upcast).
- **Work.** The forward and the input-gradient half of the backward run for every layer; the
  weight-gradient half only for the adapters (and trained modules). Each adapter adds two thin GEMMs
  and two elementwise kernels (the scaling, the add; two casts more for fp32 adapters under 16-bit
  autocast) forward; backward, four GEMMs and as much elementwise traffic again (the casts'
  gradients and the add into the input's gradient).
  QLoRA dequantizes every base matrix before its forward and again before its input gradient.
- **Traffic.** Only the trainable parameters' gradients are reduced over data parallelism, and the
  optimizer touches only them.

Not modelled: LoRA dropout (``lora_dropout`` > 0 adds a dropout mask and a copy per adapted input;
PEFT's default is 0) and DoRA's magnitude vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from computewise.errors import InputError
from computewise.estimate.activations import composite_activation_bytes
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.memory import optimizer_state_bytes
from computewise.estimate.quantized import dequant_bytes_moved, four_bit_weight_bytes
from computewise.models.lora import LinearLayer, check_rank, lora_params, quantizable_linears, resolve_targets
from computewise.specs import PAGED_OPTIMIZERS, FineTune, ModelSpec, Optimizer
from computewise.specs.finetune import METHOD_NAMES

__all__ = ["Adapters", "adapter_optimizer_bytes"]

_FP32_BYTES = 4.0
_HALF_BYTES = 2.0
# PEFT's forward of an adapted layer beyond its two GEMMs: the product scaled, then added to the base
# layer's output, each its own kernel in eager PyTorch (two casts more for fp32 adapters).
_ADAPTER_ELEMENTWISE_KERNELS = 2.0
_DEQUANT_KERNELS = 2.0  # double quantization: the 8-bit absmax first, then the 4-bit weights


def adapter_optimizer_bytes(optimizer: Optimizer, param_bytes: FloatArray | float) -> FloatArray | float:
    """Optimizer state per trained parameter on the device, no master copy (PEFT trains the adapters as
    they are stored).

    ``torch.optim`` keeps AdamW's two moments and SGD's momentum in the parameter's dtype;
    bitsandbytes' optimizers keep 32-bit or 8-bit states whatever the parameter, and its paged ones
    keep them off the caching allocator (``memory.optimizer_bytes_per_param``).
    """
    if optimizer in PAGED_OPTIMIZERS:
        return 0.0
    if optimizer in ("adamw", "adam", "sgd"):
        return (1.0 if optimizer == "sgd" else 2.0) * param_bytes
    return optimizer_state_bytes(optimizer)


@dataclass(frozen=True)
class Adapters:
    """A LoRA or QLoRA job's adapters on one model; ``Adapters.of`` returns None for full training."""

    finetune: FineTune
    optimizer: Optimizer  # over the trained parameters only
    targets: tuple[LinearLayer, ...]  # adapted linear layers of one block
    base_linears: tuple[LinearLayer, ...]  # the linear layers of one block bitsandbytes stores in 4 bits
    layers: int
    adapter_params: float  # A and B of every adapted layer
    saved_params: float  # modules_to_save: embeddings or LM head trained in full beside the frozen originals
    quantizable_params: float  # base parameters of the blocks' linear layers
    active_experts: int = 1  # MoE: the experts each token passes through (their adapters with them)

    @classmethod
    def of(cls, model: ModelSpec, finetune: FineTune, optimizer: Optimizer = "adamw") -> Adapters | None:
        """The adapters of ``finetune`` on ``model``, checked against its layers; None for full training."""
        if not finetune.adapted:
            return None
        if not model.is_transformer:
            raise InputError(
                f"{METHOD_NAMES[finetune.method]} needs a transformer's linear layers; "
                f"{model.name} has none the estimator knows",
                hint="use --method full, or give a Hugging Face config.json of a transformer",
            )
        check_rank(model, finetune)
        params = lora_params(model, finetune)
        return cls(
            finetune=finetune,
            optimizer=optimizer,
            targets=resolve_targets(model, finetune.targets),
            base_linears=quantizable_linears(model),
            layers=max(model.total_layers, 1),
            adapter_params=float(params.adapter),
            saved_params=float(params.trainable - params.adapter),
            quantizable_params=float(params.quantizable),
            active_experts=max(model.active_experts, 1),
        )

    @property
    def quantized(self) -> bool:
        return self.finetune.quantized

    def _per_token(self, layer: LinearLayer) -> float:
        """Copies of ``layer`` a token passes through: an MoE expert's only for the experts it is routed to."""
        return float(min(layer.per_block, self.active_experts))

    def _rank(self, layer: LinearLayer) -> float:
        """The rank of ``layer``'s adapter: PEFT doubles it on a fused gate/up expert (``rank_pattern``)."""
        return self.rank * layer.rank_scale

    @property
    def trainable_params(self) -> float:
        return self.adapter_params + self.saved_params

    @property
    def rank(self) -> float:
        return float(self.finetune.rank)

    def residual_bytes(self, act: FloatArray) -> FloatArray:
        """Bytes per value of every base weight kept unquantized, and so of the residual stream and the base
        layers' outputs: fp32 under QLoRA (``prepare_model_for_kbit_training`` upcast the embedding, norms
        and head), else the base's own 16 or 32 bits."""
        return np.where(self.quantized, _FP32_BYTES, col(act))

    def frozen_bytes(self, model: ModelSpec, act: FloatArray) -> FloatArray:
        """Bytes of the frozen base: 4-bit linear layers under QLoRA, the rest at ``residual_bytes``."""
        if not self.quantized:
            return float(model.params) * self.residual_bytes(act)
        double = self.finetune.double_quant
        four_bit = sum(
            four_bit_weight_bytes(layer.in_features * layer.out_features, double_quant=double) * layer.per_block
            for layer in self.base_linears
        )
        rest = float(model.params) - self.quantizable_params
        return float(four_bit * self.layers) + rest * self.residual_bytes(act)

    def trainable_bytes(self, act: FloatArray) -> FloatArray:
        """Bytes of the trained weights (their gradients are as large): adapters at their own width,
        saved modules at the base's unquantized width."""
        return self.adapter_params * float(self.finetune.adapter_bytes) + self.saved_params * self.residual_bytes(act)

    def optimizer_bytes(self, act: FloatArray) -> FloatArray:
        """Optimizer state of the adapters and of any saved modules, each at its parameters' width."""
        optimizer = self.optimizer
        adapter = self.adapter_params * adapter_optimizer_bytes(optimizer, float(self.finetune.adapter_bytes))
        return col(adapter + self.saved_params * adapter_optimizer_bytes(optimizer, self.residual_bytes(act)))

    def cast_bytes(self, model: ModelSpec, act: FloatArray) -> FloatArray:
        """What lives from a layer's forward to its backward beside the weights, per model (not sharded).

        Autocast's cached 16-bit copies of fp32 adapters; under QLoRA the LM head's 16-bit copy (saved
        by its matmul for the input gradient) and one base matrix dequantized to bf16 at a time.
        """
        autocast = col(act) < _FP32_BYTES
        adapters = np.where(
            autocast & (self.finetune.adapter_bytes > _HALF_BYTES), _HALF_BYTES * self.adapter_params, 0.0
        )
        if not self.quantized:
            return adapters
        head = _HALF_BYTES * model.vocab_size * model.hidden_size if not self.finetune.train_head else 0.0
        largest = max(layer.in_features * layer.out_features for layer in self.base_linears)
        return adapters + head + _HALF_BYTES * largest

    def layer_terms(self, model: ModelSpec, act: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per-token bytes one adapted transformer block keeps for its backward, as ``memory.layer_terms``
        returns them: (kept whole under TP, split by TP, attention scores per key).

        Norms: their fp32 input and one fp32 statistic per row (RMSNorm's rsqrt; LayerNorm's mean and
        rstd); the frozen weight's product saves nothing. Attention: the flash kernel's q, k, v and
        output at the activation width. MLP: the activation's input, and under a gated MLP the
        product's two operands, at the base layers' output width; what a composed activation keeps
        beyond that (``activations.composite_activation_bytes``). Adapters: their own 16-bit input
        copy and ``lora_A``'s output. Adapter inputs are counted whole under TP (PEFT runs LoRA
        beside unsharded layers; TP with LoRA is rare).
        """
        act = col(act)
        residual = self.residual_bytes(act)
        h = float(model.hidden_size)
        d_attn = float(model.heads * model.attention_head_dim)
        d_kv = float(model.kv_heads * model.attention_head_dim)
        ffn = float(model.ffn_size * model.active_experts)
        drop = 0.0 if model.gated_ffn else 1.0  # GPT-2-style models train with dropout
        row_stats = _FP32_BYTES if model.gated_ffn else 2 * _FP32_BYTES
        norms = 2.0 * (np.maximum(residual, _FP32_BYTES) * h + row_stats)
        adapter_width = np.where(act < _FP32_BYTES, _HALF_BYTES, _FP32_BYTES)
        adapted = sum(self._per_token(layer) * (layer.in_features + self._rank(layer)) for layer in self.targets)
        replicated = norms + adapter_width * adapted + 2 * drop * h  # two 1-byte dropout masks
        mlp = (3.0 if model.gated_ffn else 1.0) * residual * ffn + composite_activation_bytes(model, act) * ffn
        split = act * (2 * d_attn + 2 * d_kv) + mlp
        scores_per_s = model.heads * (act + drop * (1.0 + act))
        return replicated, split, col(scores_per_s)

    def adapter_gemm_shapes(self) -> list[tuple[float, float, float]]:
        """(n, k, count) of one block's adapter GEMMs in the forward: x A^T (rank x in), then (.) B^T."""
        shapes: list[tuple[float, float, float]] = []
        for layer in self.targets:
            shapes.append((self._rank(layer), float(layer.in_features), self._per_token(layer)))
            shapes.append((float(layer.out_features), self._rank(layer), self._per_token(layer)))
        return shapes

    def adapter_elementwise_bytes(self, act: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(bytes per token, kernels) of one block's adapter elementwise work in the forward.

        The scaling of the adapter's output and its add into the base layer's output; when the adapters
        are wider than the activations (fp32 adapters under 16-bit autocast), PEFT's cast of the input
        to fp32 and autocast's cast back, each reading and writing both widths.
        """
        act = col(act)
        residual = self.residual_bytes(act)
        casts = (float(self.finetune.adapter_bytes) > act).astype(float)
        inputs = sum(self._per_token(layer) * layer.in_features for layer in self.targets)
        outputs = sum(self._per_token(layer) * layer.out_features for layer in self.targets)
        per_token = casts * 2 * (act + _FP32_BYTES) * inputs + (2 * _HALF_BYTES + 3 * residual) * outputs
        adapted = sum(self._per_token(layer) for layer in self.targets)
        return per_token, (_ADAPTER_ELEMENTWISE_KERNELS + 2 * casts) * adapted

    def dequant_per_layer(self) -> tuple[float, float]:
        """(bytes moved, kernels) to dequantize one block's base matrices once; (0, 0) without QLoRA."""
        if not self.quantized:
            return 0.0, 0.0
        double = self.finetune.double_quant
        moved = sum(
            dequant_bytes_moved(layer.in_features * layer.out_features, double_quant=double) * layer.per_block
            for layer in self.base_linears
        )
        kernels = _DEQUANT_KERNELS * sum(layer.per_block for layer in self.base_linears)
        return float(moved), kernels

    def model_flops_per_token(self, model: ModelSpec, matmul_params: float, attention: FloatArray) -> FloatArray:
        """Useful FLOPs per trained token: the forward, the input gradient of every matmul and attention's
        backward, plus the adapters' (and trained modules') forward and both backward halves."""
        head = float(model.vocab_size * model.hidden_size) if self.finetune.train_head else 0.0
        return 4.0 * matmul_params + 3.0 * col(attention) + 6.0 * self.adapter_params + 2.0 * head

    def adapter_tensors(self) -> float:
        """Trained weight tensors per block (A and B of each adapter): what the optimizer launches over."""
        return 2.0 * sum(layer.per_block for layer in self.targets)
