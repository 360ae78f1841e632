"""How a training job updates the model: every weight (full), low-rank adapters (LoRA) or adapters on a
4-bit base (QLoRA).

LoRA (Hu et al. 2021, arXiv:2106.09685) freezes the base weights and trains two small matrices
A (rank x in) and B (out x rank) beside each targeted linear layer. QLoRA (Dettmers et al. 2023,
arXiv:2305.14314) also stores the frozen base in 4 bits (NF4 or FP4 blocks of 64 values, each block's
absmax itself quantized to 8 bits in blocks of 256 under double quantization) and dequantizes it to
bf16 for every matmul. The values here are what PEFT's ``LoraConfig`` and transformers'
``BitsAndBytesConfig`` call them, so a user's config reads across.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from computewise.errors import InputError

__all__ = [
    "FINETUNE_METHODS",
    "FOUR_BIT_TYPES",
    "FULL_TRAINING",
    "LORA_TARGET_SETS",
    "METHOD_NAMES",
    "FineTune",
    "FineTuneMethod",
    "FourBitType",
]

FineTuneMethod = Literal["full", "lora", "qlora"]
FINETUNE_METHODS: tuple[FineTuneMethod, ...] = ("full", "lora", "qlora")
METHOD_NAMES: dict[str, str] = {"full": "full training", "lora": "LoRA", "qlora": "QLoRA"}  # as the papers write them
FourBitType = Literal["nf4", "fp4"]
FOUR_BIT_TYPES: tuple[FourBitType, ...] = ("nf4", "fp4")
# Named target sets: the attention projections (q, k, v, o: the LoRA paper's choice), or every linear
# layer of the transformer blocks (QLoRA's choice, PEFT's "all-linear"; never the LM head).
LORA_TARGET_SETS: tuple[str, ...] = ("attention", "all-linear")
MAX_LORA_RANK = 4096


@dataclass(frozen=True)
class FineTune:
    """The fine-tuning method of a training job. ``full`` ignores every other field.

    ``targets``: one of ``LORA_TARGET_SETS`` or module names as PEFT's ``target_modules`` takes them
    (``("q_proj", "v_proj")``). ``train_embeddings`` / ``train_head``: the input embedding and the LM
    head also trained in full (PEFT's ``modules_to_save``). ``adapter_bytes``: 4 for fp32 adapters
    (PEFT's default, ``autocast_adapter_dtype``), 2 for bf16 ones. ``four_bit``/``double_quant``:
    the 4-bit storage of a QLoRA base (ignored by ``lora``).
    """

    method: FineTuneMethod = "full"
    rank: int = 16
    alpha: float = 32.0
    targets: tuple[str, ...] = ("all-linear",)
    train_embeddings: bool = False
    train_head: bool = False
    adapter_bytes: int = 4
    four_bit: FourBitType = "nf4"
    double_quant: bool = True

    def __post_init__(self) -> None:
        """Ranges a model-independent check can hold; the rank against each layer's size is checked with the model."""
        if self.method == "full":
            return
        if not 1 <= self.rank <= MAX_LORA_RANK:
            raise InputError(
                f"LoRA rank {self.rank} is out of range",
                hint=f"give --lora-rank between 1 and {MAX_LORA_RANK}; 8-64 is usual (QLoRA used 64)",
            )
        if not 0 < self.alpha <= 1e6:
            raise InputError(
                f"LoRA alpha {self.alpha:g} is out of range", hint="give --lora-alpha above 0, usually 2x the rank"
            )
        if self.adapter_bytes not in (2, 4):
            raise InputError(
                f"adapter precision of {self.adapter_bytes} bytes is not supported",
                hint="adapters are kept in fp32 (4, PEFT's default) or bf16 (2)",
            )
        if not self.targets:
            raise InputError(
                "no LoRA target modules given", hint="give --lora-targets attention, all-linear or module names"
            )

    @property
    def adapted(self) -> bool:
        """LoRA or QLoRA: the base is frozen and only adapters (and ``modules_to_save``) train."""
        return self.method != "full"

    @property
    def quantized(self) -> bool:
        """The frozen base is stored in 4 bits."""
        return self.method == "qlora"


FULL_TRAINING = FineTune()  # every parameter trained: the default of a training job
