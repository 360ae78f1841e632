"""4-bit base weights (``estimate.quantized``) against what bitsandbytes really stores.

Every tensor of a real ``quantize_4bit`` result (on the CPU, where bitsandbytes runs the same
quantizer as on a GPU) is found by walking the returned ``QuantState``, so a tensor that a new
bitsandbytes adds is counted by the test before the formula knows it.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields, replace
from typing import Any

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate.quantized import (
    NESTED_BLOCKSIZE,
    QLORA_UNSUPPORTED_HINT,
    FourBitTensors,
    dequant_bytes_moved,
    four_bit_bits_per_param,
    four_bit_tensors,
    four_bit_weight_bytes,
    qlora_unsupported_reason,
)

# (rows, cols): one block; fewer values than a block; an odd count; a numel divisible by neither 64 nor
# 64 * 256 (15641 blocks, 62 nested blocks, the last partial); a 7B model's square projection; one
# value over a whole nested block.
SHAPES = [(64, 64), (3, 5), (33, 7), (1000, 1001), (4096, 4096), (1, 64 * NESTED_BLOCKSIZE + 1)]


def _state_tensors(state: Any) -> dict[str, Any]:
    """Every tensor a QuantState holds, nested state included, under the names of ``FourBitTensors``."""
    import torch

    names = {"absmax": "absmax", "code": "code", "offset": "offset"}
    found = {names[k]: v for k, v in vars(state).items() if isinstance(v, torch.Tensor)}
    if state.state2 is not None:
        for key, value in vars(state.state2).items():
            if isinstance(value, torch.Tensor):
                found[f"nested_{key}"] = value
        assert state.state2.state2 is None, "bitsandbytes nests the absmax once"
    return found


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("double_quant", [True, False], ids=["dq", "no-dq"])
def test_bytes_are_every_tensor_quantize_4bit_returns(
    shape: tuple[int, int], quant_type: str, double_quant: bool
) -> None:
    torch = pytest.importorskip("torch")
    functional = pytest.importorskip("bitsandbytes.functional")
    weight = torch.randn(*shape, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    packed, state = functional.quantize_4bit(
        weight, blocksize=64, compress_statistics=double_quant, quant_type=quant_type
    )
    real = {"packed": packed.nbytes} | {name: t.nbytes for name, t in _state_tensors(state).items()}

    ours = four_bit_tensors(weight.numel(), blocksize=64, double_quant=double_quant)
    assert {f.name: getattr(ours, f.name) for f in fields(ours) if getattr(ours, f.name)} == real
    assert four_bit_weight_bytes(weight.numel(), double_quant=double_quant) == sum(real.values())


@pytest.mark.parametrize("blocksize", [32, 128, 4096])
def test_other_block_sizes(blocksize: int) -> None:
    torch = pytest.importorskip("torch")
    functional = pytest.importorskip("bitsandbytes.functional")
    weight = torch.randn(300, 301, dtype=torch.bfloat16)
    packed, state = functional.quantize_4bit(weight, blocksize=blocksize, compress_statistics=True, quant_type="nf4")
    real = packed.nbytes + sum(t.nbytes for t in _state_tensors(state).values())
    assert four_bit_weight_bytes(weight.numel(), blocksize=blocksize) == real


def test_the_papers_4_127_bits_per_parameter() -> None:
    """QLoRA section 3: double quantization cuts the constants from 32/64 = 0.5 to 8/64 + 32/(64 * 256) = 0.127 bits."""
    assert four_bit_bits_per_param() == pytest.approx(4.127, abs=5e-4)
    assert four_bit_bits_per_param(double_quant=False) == 4.5
    numel = 8192 * 8192
    assert four_bit_weight_bytes(numel) * 8 / numel == pytest.approx(four_bit_bits_per_param(), abs=1e-3)
    # A 65B model (the paper's largest) in NF4 with double quantization: about 33.5 GB of weights.
    assert four_bit_weight_bytes(65_000_000_000) / 1e9 == pytest.approx(65 * 4.127 / 8, rel=1e-3)


def test_dequantizing_moves_the_stored_bytes_the_fp32_absmax_and_the_bf16_weight() -> None:
    """One dequantization of a 4096 x 4096 NF4 weight, kernel by kernel (bitsandbytes 0.50.2 on CUDA)."""
    n = 4096 * 4096
    blocks, nested = n // 64, n // 64 // 256
    blockwise = blocks + nested * 4 + 256 * 4 + blocks * 4  # uint8 absmax, nested absmax, map in; fp32 out
    add_offset = blocks * 4 + 4 + blocks * 4  # absmax + offset
    four_bit = n // 2 + blocks * 4 + n * 2  # codes and fp32 absmax in; bf16 weight out
    assert dequant_bytes_moved(n) == blockwise + add_offset + four_bit
    assert dequant_bytes_moved(n, double_quant=False) == n // 2 + blocks * 4 + n * 2
    assert dequant_bytes_moved(n, out_bytes=4) == dequant_bytes_moved(n) + 2 * n
    # Per parameter: the bf16 weight written (2), the codes read (0.5), the absmax's uint8 codes and its four
    # fp32 passes (17/64); the nested absmax and the map add less than 0.001.
    assert dequant_bytes_moved(n) / n == pytest.approx(2.5 + 17 / 64, abs=1e-3)


@pytest.mark.parametrize(("numel", "blocksize"), [(0, 64), (-1, 64), (100, 48), (100, 8192)])
def test_impossible_weights_and_block_sizes_are_refused(numel: int, blocksize: int) -> None:
    with pytest.raises(InputError) as raised:
        four_bit_weight_bytes(numel, blocksize=blocksize)
    assert raised.value.hint
    if numel > 0:
        with pytest.raises(InputError, match="block size"):
            four_bit_bits_per_param(blocksize=blocksize)


def test_tensors_total_their_fields() -> None:
    tensors = FourBitTensors(packed=1, absmax=2, code=3, offset=4, nested_absmax=5, nested_code=6)
    assert tensors.total == 21


@pytest.mark.parametrize(
    "slug", ["t4", "v100-16gb", "a100-80gb", "h100-sxm", "l40s", "mi300x", "mi250x", "epyc-9654", "apple-m2"]
)
def test_qlora_runs_where_bitsandbytes_has_kernels(catalog: Catalog, slug: str) -> None:
    for four_bit in ("nf4", "fp4"):
        assert qlora_unsupported_reason(catalog.accelerator(slug), four_bit) is None


@pytest.mark.parametrize("slug", ["tpu-v4", "tpu-v5e", "tpu-v5p", "trainium", "inferentia2"])
def test_qlora_is_refused_without_kernels(catalog: Catalog, slug: str) -> None:
    accelerator = catalog.accelerator(slug)
    reason = qlora_unsupported_reason(accelerator)
    assert reason is not None
    assert accelerator.name in reason
    assert "NVIDIA GPUs" in reason
    assert "LoRA on a 16-bit base" in QLORA_UNSUPPORTED_HINT


def test_gaudi_runs_nf4_only(catalog: Catalog) -> None:
    for slug in ("gaudi2", "gaudi3"):
        gaudi = catalog.accelerator(slug)
        assert qlora_unsupported_reason(gaudi, "nf4") is None
        reason = qlora_unsupported_reason(gaudi, "fp4")
        assert reason is not None and "NF4 only" in reason


def test_a_user_row_of_an_unknown_vendor_is_refused(catalog: Catalog) -> None:
    npu = replace(catalog.accelerator("gaudi2"), slug="ascend-910b", name="Ascend 910B", vendor="Huawei")
    assert qlora_unsupported_reason(npu) is not None
    assert qlora_unsupported_reason(replace(npu, kind="cpu", name="Kunpeng 920")) is None


def test_import_needs_no_torch() -> None:
    script = "import sys\nimport computewise.estimate.quantized\nprint('torch' in sys.modules)\n"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False"]
