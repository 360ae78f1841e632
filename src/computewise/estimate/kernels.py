"""A step as the kernels a framework launches: each timed on the device, each issued by the host.

A flat share of peak cannot be right for both a 1T-parameter Megatron run and a 160M-parameter
Hugging Face fine-tune: on one H100 the latter spends most of its step in kernels that move bytes
(unfused RMSNorm in fp32, rotary, casts, the loss over 32K logits, the optimizer update) and in
the host's time to launch about a hundred kernels per layer. So a step is described per layer as
the kernels the chosen code runs (``framework``: Megatron's fused kernels, plain PyTorch under
autocast, Hugging Face ``transformers``' modules; ``execution``: eager, ``torch.compile``'s fused
kernels, or CUDA graphs), and each kind is timed by its own roofline:

- a GEMM of shape (m, n, k): ``2mnk`` FLOPs at the large-GEMM rate, scaled down for small output
  tiles (fewer tiles than the chip has SMs) and short inner dimensions (prologue and epilogue
  dominate), or its operands over the streaming bandwidth, whichever is longer;
- fused attention: its FLOPs at the attention rate (FlashAttention reaches a lower share of peak
  than a GEMM, and its backward repeats the QK^T product: 2.5x the forward's work, Dao 2023), on
  the 16-bit tensor cores when only the linear layers run in 8 bits (``attention_peak_ratio``);
- every other kernel: the bytes it reads and writes over the streaming bandwidth;
- every kernel: a floor of device time (launch to finish on an idle device), and on the host a
  cost per launch that depends on the code issuing it.

Host and device run concurrently, so a step takes the longer of the two: a small model whose host
cannot keep up is launch-bound, whatever its FLOPs (the measured H100 rows in
``benchmarks/data/measured``). The rates are the accelerator's: a bench calibration's measured
matmul peak and triad bandwidth where the user saved one (``computewise bench --save``), else the
data sheet times the shares its catalog profile gives (kernel_profiles.csv: measured for the H100,
published kernel benchmarks for others), else the catalog's assumed shares. Both are bursts: a step
synchronised over several devices runs its GEMMs at the sustained share of them
(``sustained_matmul_share``, a chip at its power limit) and at the pace of the slowest device
(``slowest_device_share``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from computewise.estimate.activations import composite_activation_traffic
from computewise.estimate.arrays import FloatArray, col
from computewise.estimate.assumptions import Assumptions
from computewise.estimate.flops import DOTS, OP_SELECTIVE, layer_matmuls
from computewise.specs import (
    ATTENTION_KERNELS,
    EXECUTIONS,
    FRAMEWORKS,
    LOSSES,
    AttentionKernel,
    Dtype,
    KernelProfile,
    ModelSpec,
)

if TYPE_CHECKING:
    from computewise.estimate.adapters import Adapters

__all__ = [
    "HostCosts",
    "KernelRates",
    "MicrobatchKernels",
    "MicrobatchShape",
    "StepKernels",
    "attention_peak_ratio",
    "decode_kernels",
    "distinct_training_kernels",
    "experts_touched",
    "gemm_s",
    "local_experts_touched",
    "optimizer_kernels",
    "prefill_kernels",
    "profile_shares",
    "serving_quantiser",
    "sustained_share",
    "training_kernels",
]

_MEGATRON = float(FRAMEWORKS.index("megatron"))
_TRANSFORMERS = float(FRAMEWORKS.index("transformers"))
_COMPILE = float(EXECUTIONS.index("compile"))
_FUSED_LOSS = float(LOSSES.index("fused"))
_EAGER_LOSS = float(LOSSES.index("eager"))
_GRAPHS = float(EXECUTIONS.index("cuda-graphs"))

# A GEMM whose output has fewer than this many elements leaves SMs idle (132 SMs x 128 x 128 tiles
# is one full wave on an H100; a quarter of it still keeps most SMs busy with smaller tiles), and
# one whose inner dimension is short spends a fixed part of every tile loading and storing.
_GEMM_OUTPUT_HALF = 2.0**18
_GEMM_INNER_HALF = 64.0
_FP32 = 4.0
# Tensor cores take 16-bit operands whose dimensions are multiples of 8 (16 bytes); a GEMM with an odd
# dimension (GPT-2's 50,257-token vocabulary) runs padded or on slower kernels: NVIDIA's Deep Learning
# Performance Guide ("Matrix Multiplication Background", Tensor Core requirements) shows 2-4x, and
# padding that vocabulary to 50,304 made nanoGPT's whole step about 25 % faster (Karpathy, nanoGPT), which
# at GPT-2 124M's share of head FLOPs means the unpadded head ran at about a quarter of the aligned rate.
# fp32 products run without tensor cores and need no alignment.
_ALIGNMENT = 8.0
_MISALIGNED_SHARE = 0.25
_ATTENTION_BACKWARD_WORK = 2.5  # FlashAttention-2's backward: 5 matmuls to the forward's 2 (Dao 2023)
_DISTINCT_MIN_ROWS = 256  # fewer rows are timed directly: finding the distinct ones would cost more
_PACKED_KEY_LIMIT = 2**62  # the distinct-row key is renumbered before it could overflow an int64
_ADAM_BYTES_PER_PARAM = 28.0  # fused AdamW reads weight, gradient, two moments (fp32) and writes three
_CAST_BYTES_PER_PARAM = 6.0  # autocast reads each fp32 weight and writes its 16-bit copy, every forward
_GRAD_ACCUMULATE_BYTES_PER_PARAM = 10.0  # a 16-bit weight gradient read, added into the fp32 .grad
# Precisions that quantise the linear layers' GEMMs and leave attention to the 16-bit kernels:
# Transformer Engine's fp8 training runs DotProductAttention in bf16 unless fp8 attention is asked for
# (its recipe's fp8_dpa, Megatron's --fp8-dot-product-attention, both off by default), and vLLM's fp8
# and int8 W8A8 schemes quantise nn.Linear only, attention reading a 16-bit KV cache by default.
_EIGHT_BIT_LINEAR: tuple[Dtype, ...] = ("fp8", "int8")
# fp8 training quantises every GEMM input when it is used, per tensor and from its current values:
# Transformer Engine's current scaling (Megatron-Bridge's fp8 recipe; ``Float8CurrentScalingQuantizer``:
# nvte_compute_amax, nvte_compute_scale_from_amax, nvte_quantize) and torchao's tensorwise float8 alike.
# One pass reads the 16-bit tensor for its absolute maximum, a one-thread kernel makes the scale, and the
# cast reads the tensor again and writes it in fp8 twice, row-wise for this GEMM and transposed for the
# weight gradient (Hopper's fp8 GEMMs take both operands K-major). Weights are cast once a step, not timed.
_QUANTISE_READS = 2.0
_QUANTISE_WRITTEN_BYTES = 2.0
_QUANTISE_KERNELS = 3.0
# Serving with 8-bit weights and activations (vLLM's W8A8) quantises each linear layer's input on the fly,
# written once in 8 bits: fp8 per tensor, a max-reduction pass and then the cast (``scaled_fp8_quant``: two
# reads, two kernels); int8 per token, one kernel that keeps each row on chip (``scaled_int8_quant``: one
# read). Indexed by ``serving_quantiser``'s code: none, fp8, int8.
_SERVING_QUANTISER_READS = np.array([0.0, 2.0, 1.0])
_SERVING_QUANTISER_KERNELS = np.array([0.0, 2.0, 1.0])


@dataclass(frozen=True)
class KernelRates:
    """What one device sustains per kernel kind, per row."""

    gemm_flops: FloatArray  # a large GEMM at the job's precision
    # A large GEMM that 8-bit recipes leave in 16 bits (attention's own matmuls, the LM head): gemm_flops
    # at every other precision.
    unquantised_gemm_flops: FloatArray
    attention_flops: FloatArray  # fused attention (FlashAttention-2), forward
    stream_bytes_per_s: FloatArray  # an elementwise kernel's HBM bandwidth
    kernel_floor_s: FloatArray  # device time of the smallest kernel
    # Each fused kernel's rate over FlashAttention-2's, in ATTENTION_KERNELS order (unfused attention is
    # timed as its GEMMs and softmax instead, so its entry is never read).
    attention_shares: tuple[float, ...]

    @classmethod
    def of(
        cls,
        peak_flops: FloatArray,
        memory_bandwidth_bytes_per_s: FloatArray,
        assumptions: Assumptions,
        matmul_fraction: FloatArray | None = None,
        stream_fraction: FloatArray | None = None,
        devices: FloatArray | float = 1.0,
        attention_peak_ratio: FloatArray | None = None,
        sustained_fraction: FloatArray | None = None,
    ) -> KernelRates:
        """Rates from the data sheet (or a calibration's measured peak and triad) and the burst shares a
        kernel reaches of them: measured or published where given (``profile_shares``), else the catalog's
        assumptions. One device is timed at its burst rate (the measured H100 rows ran one GPU beside idle
        ones); a step synchronised over several ``devices`` runs its GEMMs at ``sustained_fraction`` of the
        burst (``sustained_share``; None: a GPU's, at its power limit and at the pace of the slowest). A
        device of unknown bandwidth (0) is timed by its FLOPs alone. Attention and the LM head run at
        ``attention_peak_ratio`` of the GEMMs' peak (``kernels.attention_peak_ratio``; None: 1)."""
        matmul = assumptions.matmul_peak_fraction if matmul_fraction is None else matmul_fraction
        stream = assumptions.stream_bandwidth_fraction if stream_fraction is None else stream_fraction
        at_scale = sustained_share(None, assumptions) if sustained_fraction is None else col(sustained_fraction)
        gemm_flops = col(peak_flops) * col(matmul) * np.where(col(devices) > 1, at_scale, 1.0)
        unquantised = gemm_flops * (1.0 if attention_peak_ratio is None else col(attention_peak_ratio))
        bandwidth = col(memory_bandwidth_bytes_per_s)
        return cls(
            gemm_flops=gemm_flops,
            unquantised_gemm_flops=unquantised,
            attention_flops=unquantised * assumptions.attention_share_of_matmul,
            stream_bytes_per_s=np.where(bandwidth > 0, bandwidth * col(stream), np.inf),
            kernel_floor_s=col(assumptions.kernel_floor_s),
            attention_shares=_attention_shares(assumptions),
        )

    def unquantised(self) -> KernelRates:
        """These rates for the GEMMs an 8-bit recipe leaves in 16 bits (attention's matmuls, the LM head)."""
        return replace(self, gemm_flops=self.unquantised_gemm_flops)

    def fused_attention_flops(self, attention: FloatArray) -> FloatArray:
        """The forward rate of each row's fused attention kernel (``attention``: its ATTENTION_KERNELS index)."""
        shares: FloatArray = np.asarray(self.attention_shares)[col(attention).astype(np.intp)]
        return self.attention_flops * shares


def _attention_shares(assumptions: Assumptions) -> tuple[float, ...]:
    """Each attention kernel's rate over FlashAttention-2's CUDA kernels, from the catalog's assumptions; the
    unfused entry is never read (its GEMMs and softmax are timed instead). Keyed by every kernel, so a new
    one without a rate fails here rather than running at FlashAttention-2's."""
    shares: dict[AttentionKernel, float] = {
        "unfused": 1.0,
        "flash": 1.0,
        "triton": assumptions.triton_attention_share_of_flash,
        "flash-v1": assumptions.flash_v1_attention_share_of_flash,
    }
    return tuple(shares[kernel] for kernel in ATTENTION_KERNELS)


def attention_peak_ratio(peak_flops: Mapping[Dtype, float], precision: str) -> float:
    """Attention's tensor-core peak over the GEMMs' at ``precision`` (``KernelRates.of``): the 16-bit peak
    over the 8-bit one where only the linear layers are quantised (``_EIGHT_BIT_LINEAR``), else 1. On an
    H100 fp8's GEMMs have twice bf16's peak and its attention does not; a chip whose 8-bit peak is no
    higher than its 16-bit one (Gaudi 3) keeps 1."""
    peaks = {str(name): value for name, value in peak_flops.items()}
    own = peaks.get(precision, 0.0)
    sixteen = max(peaks.get("bf16", 0.0), peaks.get("fp16", 0.0))
    if precision not in _EIGHT_BIT_LINEAR or own <= 0.0 or sixteen <= 0.0:
        return 1.0
    return min(sixteen / own, 1.0)


def sustained_share(profile: KernelProfile | None, assumptions: Assumptions) -> float:
    """What a step synchronised over several devices sustains of a GEMM's burst rate (``KernelRates.of``):
    the profile's own figure where it gives one, else a GPU's at its power limit, waiting for the slowest."""
    if profile is not None and profile.sustained_share is not None:
        return profile.sustained_share
    return assumptions.sustained_matmul_share * assumptions.slowest_device_share


def profile_shares(profile: KernelProfile | None, dtype: str, assumptions: Assumptions) -> tuple[float, float]:
    """(matmul, stream) burst shares of the data sheet for ``KernelRates.of``: the accelerator's catalog
    profile (measured or published, kernel_profiles.csv) where it has one, else the assumptions."""
    if profile is None:
        return assumptions.matmul_peak_fraction, assumptions.stream_bandwidth_fraction
    stream = assumptions.stream_bandwidth_fraction if profile.stream_share is None else profile.stream_share
    return profile.matmul_share_for(dtype), stream


@dataclass(frozen=True)
class HostCosts:
    """Host seconds to issue one kernel, by the code that issues it (catalog assumptions)."""

    eager_s: float  # plain PyTorch or Megatron, eager, without autograd (inference)
    transformers_s: float  # Hugging Face modules, eager: a Python module call around most kernels
    recording_s: float  # what a training forward adds per eager kernel: autocast's dispatch, autograd's graph
    autograd_s: float  # a backward kernel, issued by the C++ autograd engine with no Python around it
    compiled_s: float  # torch.compile's generated wrapper, forward and backward
    graphs_s: float  # a CUDA graph replays its kernels with no host work per kernel
    convolution_s: float  # what a cuDNN convolution call adds to its launch, outside a CUDA graph

    @classmethod
    def of(cls, assumptions: Assumptions) -> HostCosts:
        return cls(
            eager_s=assumptions.host_s_per_kernel_eager,
            transformers_s=assumptions.host_s_per_kernel_transformers,
            recording_s=assumptions.host_s_per_kernel_recording,
            autograd_s=assumptions.host_s_per_kernel_autograd,
            compiled_s=assumptions.host_s_per_kernel_compiled,
            graphs_s=assumptions.host_s_per_kernel_graphs,
            convolution_s=assumptions.host_s_per_convolution,
        )

    def per_convolution_s(self, execution: FloatArray) -> FloatArray:
        """Host seconds a cuDNN convolution call adds, per row: none when a CUDA graph replays it."""
        return np.where(col(execution) == _GRAPHS, 0.0, self.convolution_s)

    def per_kernel_s(
        self, framework: FloatArray, execution: FloatArray, *, training: bool
    ) -> tuple[FloatArray, FloatArray]:
        """(forward, backward) host seconds per kernel for each row's code."""
        eager = np.where(col(framework) == _TRANSFORMERS, self.transformers_s, self.eager_s)
        eager = eager + (self.recording_s if training else 0.0)
        choices = [col(execution) == _GRAPHS, col(execution) == _COMPILE]
        forward = np.select(choices, [self.graphs_s, self.compiled_s], eager)
        backward = np.select(choices, [self.graphs_s, self.compiled_s], self.autograd_s)
        return forward, backward


@dataclass(frozen=True)
class StepKernels:
    """Device seconds and kernel launches of some work, per row: launched by the forward's code or by autograd."""

    device_s: FloatArray
    kernels: FloatArray
    backward_kernels: FloatArray | float = 0.0
    host_s: FloatArray | float = 0.0  # host seconds beyond the launches themselves (a cuDNN call's planning)

    def __add__(self, other: StepKernels) -> StepKernels:
        return StepKernels(
            self.device_s + other.device_s,
            self.kernels + other.kernels,
            self.backward_kernels + other.backward_kernels,
            self.host_s + other.host_s,
        )

    def times(self, factor: FloatArray | float) -> StepKernels:
        return StepKernels(
            self.device_s * factor, self.kernels * factor, self.backward_kernels * factor, self.host_s * factor
        )

    def backward(self, device_factor: float, kernel_factor: float) -> StepKernels:
        """This forward work's backward: ``device_factor`` times its device time, its kernels issued by autograd."""
        return StepKernels(self.device_s * device_factor, 0.0 * self.kernels, self.kernels * kernel_factor)

    def take(self, index: npt.NDArray[np.intp]) -> StepKernels:
        """Rows ``index`` of each column (a scalar column stays a scalar)."""

        def rows(column: FloatArray | float) -> FloatArray | float:
            return column if np.ndim(column) == 0 else np.asarray(column)[index]

        return StepKernels(
            col(rows(self.device_s)), col(rows(self.kernels)), rows(self.backward_kernels), rows(self.host_s)
        )

    def wall_s(self, host_s_per_kernel: tuple[FloatArray, FloatArray]) -> FloatArray:
        """Host and device overlap: the longer of the two bounds the wall time."""
        forward_s, backward_s = host_s_per_kernel
        host = self.kernels * forward_s + self.backward_kernels * backward_s + self.host_s
        return np.maximum(self.device_s, host)


def gemm_s(
    m: FloatArray, n: FloatArray | float, k: FloatArray | float, value_bytes: FloatArray, rates: KernelRates
) -> FloatArray:
    """Device seconds of one (m x k) @ (k x n) GEMM: compute at a size-dependent share, or its operands' traffic.

    The share is mn / (mn + output half) * k / (k + inner half) of the large-GEMM rate, so the
    compute time 2mnk / (rate * share) is 2 (mn + output half) (k + inner half) / rate: written that
    way it costs the planner's columns a third of the arithmetic.
    """
    m, n, k = col(m), col(n), col(k)
    output = m * n
    compute_s = 2.0 * (output + _GEMM_OUTPUT_HALF) * (k + _GEMM_INNER_HALF) / rates.gemm_flops
    aligned = (np.mod(n, _ALIGNMENT) == 0) & (np.mod(k, _ALIGNMENT) == 0)
    if not np.all(aligned):
        compute_s = compute_s / np.where(aligned | (col(value_bytes) >= _FP32), 1.0, _MISALIGNED_SHARE)
    memory_s = (m * k + k * n + output) * col(value_bytes) / rates.stream_bytes_per_s
    return np.maximum(compute_s, memory_s) + rates.kernel_floor_s


@dataclass(frozen=True)
class MicrobatchKernels:
    """One micro-batch's work without recomputation (what no gradient sync can hide behind) and with it."""

    plain: StepKernels
    recomputed: StepKernels


def _stream(n_bytes: FloatArray, kernels: FloatArray | float, rates: KernelRates) -> StepKernels:
    device = col(n_bytes) / rates.stream_bytes_per_s + col(kernels) * rates.kernel_floor_s
    return StepKernels(device, col(kernels) + 0.0 * device)


@dataclass(frozen=True)
class _Elementwise:
    """Per-layer elementwise work of one forward: bytes per token and kernel count."""

    bytes_per_token: FloatArray
    kernels: FloatArray


def _elementwise(
    model: ModelSpec, act: FloatArray, framework: FloatArray, execution: FloatArray, tp: FloatArray, sp: FloatArray
) -> _Elementwise:
    """The forward's elementwise kernels of one layer, as the chosen code runs them.

    Residual-stream widths are divided by tp only under sequence parallelism; MLP and attention
    widths always are. ``act`` is the activation width (2 for 16-bit autocast, 4 for fp32).
    """
    h = float(model.hidden_size)
    f = float(model.ffn_size * model.active_experts)
    d_attn = float(model.heads * model.attention_head_dim)
    d_kv = float(model.kv_heads * model.attention_head_dim)
    gated = 1.0 if model.gated_ffn else 0.0
    drop = 0.0 if model.gated_ffn else 1.0  # Llama-style models train without dropout
    rotary = gated  # Llama-style models rotate q and k; GPT-style learn positions
    h_tok = h / np.where(col(sp) > 0, col(tp), 1.0)
    f_tok, qk = f / col(tp), (d_attn + d_kv) / col(tp)
    residual = np.where(col(framework) == _MEGATRON, act, np.maximum(act, _FP32))  # autocast keeps it fp32
    # Fused (Megatron, torch.compile): norm, bias-dropout-add twice, the MLP activation, rotary.
    act_bytes = np.where(gated > 0, 3.0, 2.0) * act * f_tok
    fused_bytes = 2 * 2 * residual * h_tok + 2 * (3 * residual + drop) * h_tok + act_bytes + rotary * 2 * act * qk
    fused_kernels = 4.0 + 1.0 + rotary
    # Plain PyTorch eager (autocast): norm (fp32) and its cast before each matmul, dropout and the
    # residual add each their own kernel, SiLU and the product of SwiGLU apart.
    norm_cast = 2 * residual * h_tok + (residual + act) * h_tok
    add = (2 * residual + act) * h_tok
    dropout = drop * (2 * act + 1) * h_tok
    mlp_act = np.where(gated > 0, 5.0, 2.0) * act * f_tok
    eager_bytes = 2 * norm_cast + 2 * add + 2 * dropout + mlp_act
    eager_kernels = 8.0 + 2 * drop + gated
    # Hugging Face Llama eager: LlamaRMSNorm as six fp32 kernels (pow, mean, add, rsqrt, two muls),
    # autocast casting the fp32 norm output once per projection (q, k, v; gate, up), rotary as five
    # kernels each on q and k, and the attention output made contiguous before o_proj.
    hf_norm = (2 + 1 + 2 + 2) * _FP32 * h_tok + 6 * 4.0
    hf_casts = (3 + 2) * (residual + act) * h_tok
    hf_rotary = rotary * 10.0 * act * qk
    # transformers' activation module: several kernels where it is a composition (``estimate.activations``).
    composite = composite_activation_traffic(model, act)
    hf_act = mlp_act + composite.bytes_per_element * f_tok
    hf_bytes = 2 * hf_norm + hf_casts + hf_rotary + 2 * act * d_attn / col(tp) + 2 * add + 2 * dropout + hf_act
    hf_kernels = 12.0 + 5.0 + 10.0 * rotary + 1.0 + 2.0 + 2 * drop + 1.0 + gated + composite.kernels
    fused = (col(framework) == _MEGATRON) | (col(execution) >= _COMPILE)
    hf = col(framework) == _TRANSFORMERS
    return _Elementwise(
        bytes_per_token=np.where(fused, fused_bytes, np.where(hf, hf_bytes, eager_bytes)),
        kernels=np.where(fused, fused_kernels, np.where(hf, hf_kernels, eager_kernels)),
    )


def _matmuls(
    model: ModelSpec, framework: FloatArray, execution: FloatArray
) -> tuple[list[tuple[float, float]], FloatArray, FloatArray]:
    """(n, k) of a layer's linear layers (attention's two, then the MLP's two), and the kernel counts of
    attention's and of one MLP's: separate q/k/v and gate/up in HF modules."""
    h = float(model.hidden_size)
    f = float(model.ffn_size)
    d_attn = float(model.heads * model.attention_head_dim)
    d_kv = float(model.kv_heads * model.attention_head_dim)
    up = (2.0 if model.gated_ffn else 1.0) * f
    shapes = [(d_attn + 2 * d_kv, h), (h, d_attn), (up, h), (h, f)]
    separate = (col(framework) == _TRANSFORMERS) & (col(execution) < _GRAPHS)
    return shapes, np.where(separate, 4.0, 2.0), np.where(separate, 3.0 if model.gated_ffn else 2.0, 2.0)


def experts_touched(model: ModelSpec, tokens: FloatArray) -> FloatArray:
    """The experts of a layer that receive at least one of ``tokens`` tokens, expected: E (1 - (1 - a/E)^tokens).

    Each token picks ``active_experts`` (a) of the E experts; routing is taken as uniform, which a
    load-balancing loss trains it towards. A decode step of one sequence reads only its a experts'
    weights, a training micro-batch of thousands of tokens reads all E: the weights a step streams from
    memory grow with the tokens, not with a alone. A dense model has one expert, always touched.
    """
    experts = float(max(model.experts, 1))
    active = float(min(max(model.active_experts, 1), experts))
    # At least the a experts of one token, also for a fractional token count (a mean over rows).
    return np.maximum(experts * (1.0 - np.power(1.0 - active / experts, col(tokens))), active)


def local_experts_touched(model: ModelSpec, tokens: FloatArray, ep: FloatArray | float) -> FloatArray:
    """The experts one device runs in a layer: of its E/ep experts, those that receive at least one token.

    Expert parallelism spreads the E experts over ``ep`` devices, each device's ``tokens`` tokens are
    dispatched to the devices holding their experts, so each device's experts see the tokens of all
    ``ep`` devices (``experts_touched`` of ep x tokens), and it holds 1/ep of them.
    """
    return experts_touched(model, col(tokens) * col(ep)) / col(ep)


def _token_dispatch(
    model: ModelSpec,
    tokens: FloatArray,
    act: FloatArray,
    tp: FloatArray,
    sp: FloatArray,
    ep: FloatArray,
    rates: KernelRates,
) -> StepKernels:
    """A mixture-of-experts layer's routing and token shuffles in training, forward (its backward moves the
    same bytes back): nothing for a dense model.

    The router is a GEMM to E logits (kept out of fp8) with a softmax and a top-k over them. Megatron's
    all-to-all dispatcher then copies each token once per chosen expert into expert order (permute);
    where the exchange spreads experts over devices (ep > 1) and a device holds several, the received
    copies are regrouped by local expert and back again; the expert outputs are scattered back onto
    their tokens, weighted by the routing probabilities (unpermute). Counted in one token's hidden
    state read or written: 1 + k to permute, k + 1 to unpermute, and 2k each way to regroup.
    """
    if model.experts <= 1:
        return StepKernels(col(0.0) * tokens, col(0.0) * tokens)
    k = float(max(model.active_experts, 1))
    h = float(model.hidden_size) / np.where(col(sp) > 0, col(tp), 1.0)
    regrouped = (col(ep) > 1) & (model.experts / col(ep) > 1)
    copies = 2.0 + 2.0 * k + np.where(regrouped, 4.0 * k, 0.0)  # in units of one token's hidden state
    router = gemm_s(tokens, float(model.experts), h, act, rates.unquantised())
    scores = _stream(tokens * model.experts * 4.0 * _FP32, 4.0, rates)  # fp32 logits, softmax, top-k
    shuffles = _stream(col(tokens) * h * col(act) * copies, 4.0 + np.where(regrouped, 2.0, 0.0), rates)
    return StepKernels(router, col(1.0) + 0.0 * router) + scores + shuffles


def _linear_io_elements(model: ModelSpec, tp: FloatArray, sp: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per token, the elements of one layer's linear-layer inputs (q/k/v's and the MLP's normalised hidden state,
    the attention output, the MLP's activation) and of their output gradients, on one of ``tp`` devices: what an
    8-bit recipe quantises. A mixture-of-experts layer's MLP counts every routed copy of a token."""
    h_in = float(model.hidden_size) / np.where(col(sp) > 0, col(tp), 1.0)
    k = float(max(model.active_experts, 1))
    d_attn = float(model.heads * model.attention_head_dim) / col(tp)
    d_qkv = d_attn + 2.0 * float(model.kv_heads * model.attention_head_dim) / col(tp)
    f = float(model.ffn_size) / col(tp)
    up = (2.0 if model.gated_ffn else 1.0) * f
    return h_in + d_attn + k * (h_in + f), d_qkv + h_in + k * (up + h_in)


def _quantisation(
    model: ModelSpec,
    tokens: FloatArray,
    act: FloatArray,
    quantised: FloatArray,
    tp: FloatArray,
    sp: FloatArray,
    ep: FloatArray,
    rates: KernelRates,
) -> tuple[StepKernels, StepKernels]:
    """(forward, backward) of fp8 training's quantisation of one layer's GEMM inputs: nothing unquantised.

    The forward quantises each linear layer's input, the backward each one's output gradient, which its
    input- and weight-gradient GEMMs both read (``_linear_io_elements``); a mixture-of-experts layer's
    per local expert. The cost grows with the hidden size where the GEMMs grow with its
    square, so small models lose more of fp8's speed-up to it. The quantiser's kernels are issued from
    Transformer Engine's C++ inside the linear layer's own call, so they add device time, each at least
    the kernel floor, and no host time of their own.
    """
    forward_elements, backward_elements = _linear_io_elements(model, tp, sp)
    # Attention's two inputs, and the MLP's two per local expert (one for a dense model).
    floors_s = _QUANTISE_KERNELS * (2.0 + 2.0 * local_experts_touched(model, tokens, ep)) * rates.kernel_floor_s
    bytes_per_element = _QUANTISE_READS * col(act) + _QUANTISE_WRITTEN_BYTES
    forward_s = col(quantised) * (
        col(tokens) * forward_elements * bytes_per_element / rates.stream_bytes_per_s + floors_s
    )
    backward_s = col(quantised) * (
        col(tokens) * backward_elements * bytes_per_element / rates.stream_bytes_per_s + floors_s
    )
    return StepKernels(forward_s, 0.0 * forward_s), StepKernels(backward_s, 0.0 * backward_s)


def serving_quantiser(precision: str) -> float:
    """``InferRows.quantiser``'s code for a serving precision: 0 none, 1 fp8 (per tensor), 2 int8 (per token)."""
    return {"fp8": 1.0, "int8": 2.0}.get(precision, 0.0)


def _serving_quantisation(
    model: ModelSpec, tokens: FloatArray, act: FloatArray, tp: FloatArray, quantiser: FloatArray, rates: KernelRates
) -> StepKernels:
    """One layer's on-the-fly quantisation of its linear layers' inputs in an 8-bit forward
    (``_linear_io_elements``, per expert a token reaches); nothing at 16 bits. The LM head stays 16-bit."""
    code = col(quantiser).astype(np.int64)
    elements, _ = _linear_io_elements(model, tp, col(0.0))
    written = np.where(code > 0, 1.0, 0.0)
    n_bytes = col(tokens) * elements * (_SERVING_QUANTISER_READS[code] * col(act) + written)
    inputs = 2.0 + 2.0 * experts_touched(model, tokens)  # attention's two, the MLP's two per expert reached
    return _stream(n_bytes, _SERVING_QUANTISER_KERNELS[code] * inputs, rates)


def _layer_forward(
    model: ModelSpec,
    tokens: FloatArray,
    attended: FloatArray,
    act: FloatArray,
    tp: FloatArray,
    sp: FloatArray,
    attention: FloatArray,
    framework: FloatArray,
    execution: FloatArray,
    rates: KernelRates,
    ep: FloatArray | float = 1.0,
) -> tuple[StepKernels, StepKernels, StepKernels]:
    """(matmuls, attention core, everything else) of one layer's forward, and the backward of each.

    Returned as forward pieces; the caller scales them for the backward. ``attended`` is the mean
    number of keys a query sees (half the sequence for causal attention); ``ep`` the devices the
    experts are spread over.
    """
    shapes, attention_kernels, mlp_kernels = _matmuls(model, framework, execution)
    # The MLP runs once per touched expert on this device, on the tokens routed to it from the whole
    # expert-parallel group (as many token-expert pairs as the device's own tokens make, when balanced):
    # its weights are read once each.
    touched = local_experts_touched(model, tokens, ep)
    per_expert_tokens = tokens * float(max(model.active_experts, 1)) / touched
    gemm = col(0.0)
    for i, (n, k) in enumerate(shapes):
        # Column-parallel (qkv, up) split n over tp, row-parallel (proj, down) split k.
        n_tp, k_tp = (n / tp, k) if i in (0, 2) else (n, k / tp)
        if i < 2:
            gemm = gemm + gemm_s(tokens, n_tp, k_tp, act, rates)
        else:
            gemm = gemm + touched * gemm_s(per_expert_tokens, n_tp, k_tp, act, rates)
    matmuls = StepKernels(gemm, attention_kernels + touched * mlp_kernels + 0.0 * gemm)
    heads = model.heads / col(tp)
    d = float(model.attention_head_dim)
    core_flops = 4.0 * tokens * attended * heads * d
    fused_core = StepKernels(
        core_flops / rates.fused_attention_flops(attention) + rates.kernel_floor_s, col(1.0) + 0.0 * tokens
    )
    # Unfused attention: QK^T and PV as batched GEMMs, softmax (and dropout) over the a*s^2 scores.
    drop = 0.0 if model.gated_ffn else 1.0
    scores_bytes = tokens * heads * 2.0 * attended * (2 * act + drop * (2 * act + 1))
    bmm = gemm_s(tokens, 2.0 * attended, d, act, rates.unquantised()) * heads
    unfused_core = StepKernels(bmm, col(2.0)) + _stream(scores_bytes, 1.0 + drop, rates)
    core = StepKernels(
        np.where(col(attention) > 0, fused_core.device_s, unfused_core.device_s),
        np.where(col(attention) > 0, fused_core.kernels, unfused_core.kernels),
    )
    elementwise = _elementwise(model, act, framework, execution, tp, sp)
    rest = _stream(tokens * elementwise.bytes_per_token, elementwise.kernels, rates)
    return matmuls, core, rest


def _head_and_loss(
    model: ModelSpec,
    tokens: FloatArray,
    act: FloatArray,
    tp: FloatArray,
    logits_bytes: FloatArray,
    rates: KernelRates,
    trained: bool = True,
) -> tuple[StepKernels, StepKernels]:
    """(forward, backward) of the LM head and the cross-entropy over its logits.

    ``logits_bytes``: bytes moved per logit by the loss over forward and backward (the upcast to
    fp32, log-softmax, its gradient, the cast back; about 36 unfused, fewer when fused). A frozen
    head (``trained`` False) computes only its input's gradient.
    """
    if model.vocab_size <= 0:
        zero = StepKernels(col(0.0) * tokens, col(0.0) * tokens)
        return zero, zero
    vocab, h = model.vocab_size / col(tp), float(model.hidden_size)
    head = rates.unquantised()  # Megatron's output layer and torchao's float8 conversion keep it in 16 bits
    forward = gemm_s(tokens, vocab, h, act, head)
    backward = gemm_s(tokens, h, vocab, act, head)
    if trained:
        backward = backward + gemm_s(vocab, h, tokens, act, head)
    loss = _stream(tokens * vocab * logits_bytes, 6.0, rates)
    half = loss.times(0.5)
    head_backward = StepKernels(backward, 0.0 * tokens, col(2.0 if trained else 1.0) + 0.0 * tokens) + half.backward(
        1.0, 1.0
    )
    return StepKernels(forward, col(1.0) + 0.0 * tokens) + half, head_backward


def _adapter_forward(
    adapters: Adapters, tokens: FloatArray, act: FloatArray, tp: FloatArray, rates: KernelRates
) -> tuple[StepKernels, StepKernels, StepKernels]:
    """(adapter GEMMs, adapter elementwise, dequantization) of one block's forward: each adapter's two thin
    GEMMs, then its scaling, add and casts; under QLoRA every base matrix dequantized to bf16 (split over
    tp as its matmul is)."""
    gemm = col(0.0) * tokens
    for n, k, count in adapters.adapter_gemm_shapes():
        gemm = gemm + count * gemm_s(tokens, n, k, act, rates)
    gemm_kernels = 2.0 * sum(layer.per_block for layer in adapters.targets)
    per_token, kernels = adapters.adapter_elementwise_bytes(act)
    moved, dequant_kernels = adapters.dequant_per_layer()
    return (
        StepKernels(gemm, gemm_kernels + 0.0 * gemm),
        _stream(tokens * per_token, kernels, rates),
        _stream(moved / col(tp) + 0.0 * tokens, dequant_kernels, rates),
    )


def _unkept_matmul_share(model: ModelSpec) -> float:
    """The share of a layer's matmul FLOPs op-level selective checkpointing runs again (``flops.layer_matmuls``)."""
    matmuls = layer_matmuls(model)
    return sum(o * i for o, i in matmuls[1::2]) / sum(o * i for o, i in matmuls)


@dataclass(frozen=True)
class MicrobatchShape:
    """One device's micro-batch, per row: what ``training_kernels`` times. The codes are indices in
    ``ATTENTION_KERNELS``, ``RECOMPUTES``, ``FRAMEWORKS`` and ``EXECUTIONS``."""

    tokens: FloatArray  # tokens of one micro-batch on this device (after context parallelism)
    seq_len: FloatArray
    layers: FloatArray  # layers on this device
    act: FloatArray  # bytes of an activation element
    tp: FloatArray
    sp: FloatArray  # sequence parallelism, 0/1
    attention: FloatArray
    recompute: FloatArray  # 2 (full) repeats every layer's forward in the backward, 1 (selective) the
    # attention core, 3 (op-selective) the elementwise kernels and the matmuls whose outputs were not kept,
    # 4 (dots) the attention core and the elementwise kernels
    framework: FloatArray
    execution: FloatArray
    has_head: FloatArray  # 0/1: this device runs the LM head and the loss
    ep: FloatArray | float = 1.0  # devices the experts of a mixture-of-experts layer are spread over
    loss: FloatArray | float = 0.0  # index in LOSSES: 1 a fused cross-entropy kernel on the 16-bit logits, 2 eager
    quantised: FloatArray | float = 0.0  # 0/1: the linear layers' GEMMs run in fp8 (``_quantisation``)

    def columns(self) -> tuple[FloatArray, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


def training_kernels(
    model: ModelSpec, shape: MicrobatchShape, rates: KernelRates, adapters: Adapters | None = None
) -> MicrobatchKernels:
    """One micro-batch's forward and backward on one device: ``shape.tokens`` through ``shape.layers`` layers,
    recomputed as ``shape.recompute`` says. ``adapters``: a LoRA/QLoRA job, whose frozen matmuls compute
    input gradients only and whose adapters and dequantization add their own kernels (``_adapter_forward``).
    """
    tokens, seq_len, layers, act, tp, sp, attention, recompute, framework, execution, has_head, ep, loss, quantised = (
        shape.columns()
    )
    causal = 0.5 if model.architecture == "decoder" else 1.0
    attended = col(seq_len) * causal
    if model.sliding_window:
        attended = np.minimum(attended, float(model.sliding_window))
    matmuls, core, rest = _layer_forward(
        model, tokens, attended, act, tp, sp, attention, framework, execution, rates, ep
    )
    dispatch = _token_dispatch(model, tokens, act, tp, sp, col(ep), rates)
    quantise, quantise_backward = _quantisation(model, tokens, act, col(quantised), tp, sp, col(ep), rates)
    forward = matmuls + core + rest + dispatch + quantise
    matmul_backward = 2.0 if adapters is None else 1.0  # input and weight gradients, or the input's only
    backward = (
        matmuls.backward(matmul_backward, matmul_backward)
        + core.backward(_ATTENTION_BACKWARD_WORK, 1.0)
        + rest.backward(2.0, 2.0)
        + dispatch.backward(1.0, 1.0)
        + quantise_backward
    )
    if adapters is not None:
        adapter_gemms, adapter_rest, dequant = _adapter_forward(adapters, tokens, act, tp, rates)
        forward = forward + adapter_gemms + adapter_rest + dequant
        backward = (
            backward + adapter_gemms.backward(2.0, 2.0) + adapter_rest.backward(1.0, 1.0) + dequant.backward(1.0, 1.0)
        )
    code = col(recompute)
    # Full: the whole forward again. Megatron's selective: the attention core. Op-level selective: the
    # elementwise kernels and the matmuls whose outputs were not kept (their share of the matmul FLOPs).
    # JAX's dots policy: the attention core and the elementwise kernels, every weight matmul's output kept.
    unkept = _unkept_matmul_share(model)
    again = (
        forward.times(np.where(code == 2, 1.0, 0.0))
        + core.times(np.where((code == 1) | (code == DOTS), 1.0, 0.0))
        + rest.times(np.where(code == DOTS, 1.0, 0.0))
        + (rest + matmuls.times(unkept)).times(np.where(code == OP_SELECTIVE, 1.0, 0.0))
    )
    # Bytes a logit moves through the loss: a fused kernel reads the 16-bit logits forward and backward and
    # writes their gradient; Megatron's in-place loss and torch.compile's fused one move fewer than eager's,
    # which a loss computed outside the compiled graph still moves.
    compiled_loss = (col(execution) >= _COMPILE) & (col(loss) != _EAGER_LOSS)
    fewer_passes = (col(framework) == _MEGATRON) | compiled_loss
    logits_bytes = np.where(col(loss) == _FUSED_LOSS, 3.0 * col(act), np.where(fewer_passes, 24.0, 36.0))
    head_trained = adapters is None or adapters.finetune.train_head
    head_forward, head_backward = _head_and_loss(model, tokens, act, tp, logits_bytes, rates, trained=head_trained)
    plain = (forward + backward).times(col(layers)) + (head_forward + head_backward).times(col(has_head))
    return MicrobatchKernels(plain=plain, recomputed=plain + again.times(col(layers)))


def distinct_training_kernels(
    model: ModelSpec, shape: MicrobatchShape, rates: KernelRates, adapters: Adapters | None = None
) -> MicrobatchKernels:
    """``training_kernels``, computed once per distinct row: a plan's million layouts share a few thousand
    micro-batch shapes, codes and rates, so its kernels are timed for those and spread back by index."""
    columns = shape.columns()
    rate_columns = (
        rates.gemm_flops,
        rates.unquantised_gemm_flops,
        rates.attention_flops,
        rates.stream_bytes_per_s,
        rates.kernel_floor_s,
    )
    rows = np.broadcast_shapes(*(np.shape(c) for c in (*columns, *rate_columns)))
    if len(rows) != 1 or rows[0] < _DISTINCT_MIN_ROWS:
        return training_kernels(model, shape, rates, adapters)
    full = [np.broadcast_to(col(c), rows) for c in (*columns, *rate_columns)]
    first, index = _distinct_rows(full)
    distinct = [c[first] for c in full]
    gemm, unquantised, flash, stream, floor = distinct[len(columns) :]
    distinct_rates = KernelRates(gemm, unquantised, flash, stream, floor, rates.attention_shares)
    micro = training_kernels(model, MicrobatchShape(*distinct[: len(columns)]), distinct_rates, adapters)
    return MicrobatchKernels(plain=micro.plain.take(index), recomputed=micro.recomputed.take(index))


def _distinct_rows(columns: list[FloatArray]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(the first row of each distinct combination, each row's combination): every column is coded by its
    own sorted values and the codes are packed into one integer, so only 1-D sorts run; constant
    columns are skipped."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        if column.min() == column.max():
            continue
        values, codes = np.unique(column, return_inverse=True)
        if int(key.max()) >= _PACKED_KEY_LIMIT // len(values):
            key = np.unique(key, return_inverse=True)[1].reshape(-1)
        key = key * len(values) + codes.reshape(-1)
    _, first, index = np.unique(key, return_index=True, return_inverse=True)
    return first, index.reshape(-1)


def optimizer_kernels(
    params_per_device: FloatArray,
    optimizer_params_per_device: FloatArray,
    microbatches: FloatArray,
    framework: FloatArray,
    weight_tensors: FloatArray,
    rates: KernelRates,
) -> StepKernels:
    """What a step adds once per micro-batch or once per step outside the layers' kernels.

    Autocast's 16-bit weight copies (each forward) and the fp32 gradient accumulation (each
    backward) in the PyTorch layouts; Megatron keeps 16-bit weights and fuses the accumulation
    into the weight-gradient GEMM. The fused AdamW update reads and writes its shard once per step.
    """
    autocast = col(framework) != _MEGATRON
    per_microbatch = np.where(autocast, _CAST_BYTES_PER_PARAM + _GRAD_ACCUMULATE_BYTES_PER_PARAM, 0.0)
    cast = _stream(
        col(params_per_device) * per_microbatch * col(microbatches),
        np.where(autocast, 2.0 * col(weight_tensors), 0.0) * col(microbatches),
        rates,
    )
    update = _stream(col(optimizer_params_per_device) * _ADAM_BYTES_PER_PARAM, 4.0 + col(weight_tensors) / 64.0, rates)
    return cast + update


def prefill_kernels(
    model: ModelSpec,
    batch: FloatArray,
    prompt_len: FloatArray,
    act: FloatArray,
    tp: FloatArray,
    all_logits: FloatArray,
    framework: FloatArray,
    execution: FloatArray,
    rates: KernelRates,
    quantiser: FloatArray | float = 0.0,
) -> StepKernels:
    """The prompt's forward with the KV cache written, and the head over the last (or every) position;
    ``quantiser``: the 8-bit activation quantisation (``serving_quantiser``), none by default."""
    tokens = col(batch) * col(prompt_len)
    causal = 0.5 if model.architecture == "decoder" else 1.0
    matmuls, core, rest = _layer_forward(
        model, tokens, col(prompt_len) * causal, act, tp, col(0.0), col(1.0), framework, execution, rates
    )
    kv = _stream(tokens * 2.0 * model.kv_heads * model.attention_head_dim * act / tp, 2.0, rates)
    quantise = _serving_quantisation(model, tokens, act, tp, col(quantiser), rates)
    layers = float(max(model.total_layers, 1))
    head_tokens = np.where(col(all_logits) > 0, tokens, col(batch))
    head = _head_only(model, head_tokens, act, tp, rates)
    return (matmuls + core + rest + kv + quantise).times(layers) + head


def decode_kernels(
    model: ModelSpec,
    batch: FloatArray,
    context_len: FloatArray,
    act: FloatArray,
    kv_bytes: FloatArray,
    tp: FloatArray,
    framework: FloatArray,
    execution: FloatArray,
    rates: KernelRates,
    quantiser: FloatArray | float = 0.0,
) -> StepKernels:
    """One generated token for ``batch`` sequences: every weight read once, the cache read per layer;
    ``quantiser`` as in ``prefill_kernels``."""
    tokens = col(batch)
    matmuls, _, rest = _layer_forward(model, tokens, col(1.0), act, tp, col(0.0), col(1.0), framework, execution, rates)
    rest = rest + _serving_quantisation(model, tokens, act, tp, col(quantiser), rates)
    cache = (
        tokens * col(context_len) * 2.0 * np.ceil(model.kv_heads / col(tp)) * model.attention_head_dim * col(kv_bytes)
    )
    attention = _stream(cache + tokens * 2.0 * model.kv_heads * model.attention_head_dim * act / tp, 3.0, rates)
    layers = float(max(model.total_layers, 1))
    return (matmuls + rest + attention).times(layers) + _head_only(model, tokens, act, tp, rates)


def _head_only(
    model: ModelSpec, tokens: FloatArray, act: FloatArray, tp: FloatArray, rates: KernelRates
) -> StepKernels:
    """The final norm, the LM head and a pick of the next token (or the logits themselves)."""
    if model.vocab_size <= 0:
        return StepKernels(col(0.0) * tokens, col(0.0) * tokens)
    vocab = model.vocab_size / col(tp)
    head = gemm_s(tokens, vocab, float(model.hidden_size), act, rates.unquantised())  # vLLM keeps it 16-bit
    return StepKernels(head, col(1.0) + 0.0 * tokens) + _stream(tokens * vocab * (act + _FP32), 3.0, rates)
