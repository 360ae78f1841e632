"""A QLoRA base in 4 bits: the bytes bitsandbytes keeps for each weight, what dequantizing it moves, and
where its kernels run.

QLoRA (Dettmers et al. 2023, arXiv:2305.14314, section 3) stores each frozen weight as 4-bit codes
(NF4 or FP4) in blocks of 64 values, one fp32 absmax per block; double quantization stores those
absmax values as 8-bit codes in blocks of 256, each block with an fp32 absmax of its own:
4 + 8/64 + 32/(64 * 256) = 4.127 bits per parameter instead of 4 + 32/64 = 4.5.

The counts here follow bitsandbytes 0.50.2 (``bitsandbytes.functional.quantize_4bit`` and
``QuantState``), tensor by tensor, so a ``Linear4bit`` on the device holds exactly
``four_bit_weight_bytes`` bytes for its weight; ``tests/estimate/test_quantized.py`` checks every
tensor against a real ``quantize_4bit``. NF4 and FP4 store the same tensors (only the 16 levels in
the code table differ), so the quantization type does not enter the byte counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from computewise.errors import InputError
from computewise.specs.finetune import FourBitType
from computewise.specs.hardware import Accelerator

__all__ = [
    "FOUR_BIT_BLOCKSIZES",
    "NESTED_BLOCKSIZE",
    "QLORA_UNSUPPORTED_HINT",
    "FourBitTensors",
    "dequant_bytes_moved",
    "four_bit_bits_per_param",
    "four_bit_tensors",
    "four_bit_weight_bytes",
    "qlora_unsupported_reason",
]

# The block sizes ``quantize_4bit`` accepts; QLoRA and ``Linear4bit`` use 64.
FOUR_BIT_BLOCKSIZES: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048, 4096)
# Double quantization quantizes the absmax values in blocks of 256 (``quantize_blockwise(..., blocksize=256)``).
NESTED_BLOCKSIZE = 256
_FP32 = 4
_FOUR_BIT_LEVELS = 16  # the NF4 / FP4 code table: 16 fp32 values, a fresh tensor per weight (get_4bit_type)
_EIGHT_BIT_LEVELS = 256  # the dynamic 8-bit map of the absmax codes, copied per weight (code.to(device, copy=True))


@dataclass(frozen=True)
class FourBitTensors:
    """The bytes of each tensor one 4-bit weight keeps (``QuantState`` field names in the comments).

    ``absmax`` is fp32 per block without double quantization and uint8 per block with it; the three
    ``nested_*``/``offset`` fields are 0 without it.
    """

    packed: int  # the weight itself: two 4-bit codes per uint8
    absmax: int  # quant_state.absmax
    code: int  # quant_state.code: the 16 levels of NF4 or FP4
    offset: int  # quant_state.offset: the mean absmax, subtracted before the 8-bit quantization
    nested_absmax: int  # quant_state.state2.absmax: fp32 per 256 blocks
    nested_code: int  # quant_state.state2.code: the 256 levels of the dynamic 8-bit map

    @property
    def total(self) -> int:
        return self.packed + self.absmax + self.code + self.offset + self.nested_absmax + self.nested_code


def _blocks(numel: int, blocksize: int) -> int:
    """Blocks of a flattened tensor; a last partial block gets its own absmax, as bitsandbytes does."""
    return -(-numel // blocksize)


def _check_blocksize(blocksize: int) -> None:
    """``quantize_4bit`` raises on any other block size; say so before estimating with one."""
    if blocksize not in FOUR_BIT_BLOCKSIZES:
        raise InputError(
            f"4-bit block size {blocksize} is not one bitsandbytes supports",
            hint=f"use one of {', '.join(map(str, FOUR_BIT_BLOCKSIZES))}; QLoRA uses 64",
        )


def four_bit_tensors(numel: int, *, blocksize: int = 64, double_quant: bool = True) -> FourBitTensors:
    """Every tensor ``quantize_4bit`` returns for a weight of ``numel`` values (uint8 storage, the default)."""
    if numel < 1:
        raise InputError(f"a 4-bit weight needs at least one value, got {numel}", hint="give a non-empty weight matrix")
    _check_blocksize(blocksize)
    blocks = _blocks(numel, blocksize)
    packed = (numel + 1) // 2
    code = _FOUR_BIT_LEVELS * _FP32
    if not double_quant:
        return FourBitTensors(packed, blocks * _FP32, code, 0, 0, 0)
    nested = _blocks(blocks, NESTED_BLOCKSIZE)
    return FourBitTensors(packed, blocks, code, _FP32, nested * _FP32, _EIGHT_BIT_LEVELS * _FP32)


def four_bit_weight_bytes(numel: int, *, blocksize: int = 64, double_quant: bool = True) -> int:
    """Bytes one weight matrix of ``numel`` values holds on the device as a bitsandbytes ``Linear4bit``.

    Tensor sizes as PyTorch counts them (``nbytes``); the CUDA caching allocator rounds each of the
    six tensors up to 512 bytes, a few KiB per matrix that no memory estimate notices.
    """
    return four_bit_tensors(numel, blocksize=blocksize, double_quant=double_quant).total


def four_bit_bits_per_param(*, blocksize: int = 64, double_quant: bool = True) -> float:
    """Bits per parameter of a large 4-bit weight, the per-tensor code tables left out: the paper's figure.

    NF4 with blocks of 64 and double quantization: 4 + 8/64 + 32/(64 * 256) = 4.127 (QLoRA section 3);
    without double quantization 4.5. ``four_bit_weight_bytes(n) * 8 / n`` tends to it as n grows.
    """
    _check_blocksize(blocksize)
    if double_quant:
        return 4 + 8 / blocksize + 32 / (blocksize * NESTED_BLOCKSIZE)
    return 4 + 32 / blocksize


def dequant_bytes_moved(numel: int, *, blocksize: int = 64, double_quant: bool = True, out_bytes: int = 2) -> int:
    """Bytes read from and written to device memory to dequantize one 4-bit weight to ``out_bytes`` (bf16: 2).

    A training step dequantizes each weight once in the forward and once more for the input gradient
    in the backward (``MatMul4Bit``), and again under activation checkpointing; this is one of them.
    Kernels as bitsandbytes 0.50.2 launches them on CUDA and ROCm, each reading its inputs and writing
    its outputs once (no reuse through the cache; the code tables are counted, the scalars' launch
    overhead is not):

    - with double quantization, ``dequantize_blockwise`` reads the uint8 absmax, the nested fp32
      absmax and the 256-entry map and writes the fp32 absmax; adding the offset reads it and writes
      it again;
    - the 4-bit kernel reads the packed codes and the fp32 absmax (its 16 levels are constants in the
      kernel) and writes the dequantized weight.

    On CUDA a forward with at most 1536 rows of activations (256 on ROCm) may instead run a fused
    4-bit GEMM that writes no 16-bit weight; a training micro-batch of ``batch x sequence`` tokens is
    almost always larger, so the dequantize-then-matmul path counted here is the one training takes.
    """
    tensors = four_bit_tensors(numel, blocksize=blocksize, double_quant=double_quant)
    fp32_absmax = _blocks(numel, blocksize) * _FP32
    rebuild = 0
    if double_quant:
        blockwise = tensors.absmax + tensors.nested_absmax + tensors.nested_code + fp32_absmax
        add_offset = fp32_absmax + tensors.offset + fp32_absmax
        rebuild = blockwise + add_offset
    return rebuild + tensors.packed + fp32_absmax + numel * out_bytes


# Where bitsandbytes' 4-bit kernels run, from its installation guide for v0.50.2
# (https://huggingface.co/docs/bitsandbytes/v0.50.2/en/installation.md, retrieved 2026-11-27): "official
# support for NVIDIA GPUs, AMD GPUs, Intel XPUs, Apple Silicon, and Intel Gaudi", plus CPUs; NF4/FP4
# quantization on NVIDIA needs compute capability 6.0+ (Pascal or newer: every NVIDIA GPU and Jetson in
# the catalog, V100 7.0 being the oldest). AMD GPUs run the ROCm build (wheels for CDNA, e.g. MI250X gfx90a
# and MI300X gfx942, and RDNA). Gaudi's backend (bitsandbytes/backends/hpu/ops.py in 0.50.2) dequantizes
# NF4 only and raises on FP4. There is no backend for TPUs (XLA) or AWS Trainium/Inferentia (Neuron).
QLORA_UNSUPPORTED_HINT = (
    "fine-tune with LoRA on a 16-bit base instead of QLoRA on this accelerator, or choose one that "
    "bitsandbytes' 4-bit kernels run on: an NVIDIA GPU (e.g. --gpu rtx-4090 or --gpu a100-80gb), an AMD "
    "Instinct GPU, or Intel Gaudi with NF4"
)
_RUNS_ON = "NVIDIA GPUs (compute capability 6.0+), AMD ROCm GPUs, Intel XPUs and Gaudi, Apple Silicon and CPUs"


def qlora_unsupported_reason(accelerator: Accelerator, four_bit: FourBitType = "nf4") -> str | None:
    """Why QLoRA cannot run on ``accelerator`` with ``four_bit`` storage, or None where it can.

    The planner records the string as a rejection; the CLI prints it as the error with
    ``QLORA_UNSUPPORTED_HINT`` as the fix. CPUs are supported (slowly: bitsandbytes' CPU kernels),
    so ``estimate`` on a CPU row is answered, not refused.
    """
    vendor, kind = accelerator.vendor.lower(), accelerator.kind
    if kind == "cpu" or vendor in ("nvidia", "amd", "apple") or (vendor == "intel" and kind == "gpu"):
        return None
    if vendor == "intel" and kind == "npu":
        if four_bit == "nf4":
            return None
        return f"QLoRA with FP4 cannot run on {accelerator.name}: bitsandbytes' Gaudi backend dequantizes NF4 only"
    return f"QLoRA cannot run on {accelerator.name}: bitsandbytes has 4-bit kernels only for {_RUNS_ON}"
