"""``estimate.request``: a None field of an estimate's request takes its default there, and the notes say which."""

from __future__ import annotations

from dataclasses import replace

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.estimate import Assumptions
from computewise.estimate.request import (
    InferEstimateRequest,
    TrainEstimateRequest,
    estimate_infer_request,
    estimate_train_request,
)
from computewise.estimate.train import default_global_batch
from computewise.models import from_param_count, preset
from computewise.specs import Parallelism


def test_a_train_request_leaves_dp_to_the_gpus_and_states_its_defaults(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    model = preset("llama-3-8b")
    request = TrainEstimateRequest(model, catalog.accelerator("h100"), 16, Parallelism(tp=2, pp=2), seq_len=4096)
    result = estimate_train_request(request, catalog, assumptions)
    assert (result.parallelism.dp, result.parallelism.tp, result.parallelism.pp) == (4, 2, 2)
    assert result.job.global_batch == default_global_batch(4096, model.params, step_multiple=4)
    assert (result.job.tokens, result.job.precision, result.job.framework) == (20 * model.params, "bf16", "megatron")
    assert any(note.startswith(f"global batch {result.job.global_batch} sequences") for note in result.notes)
    assert "--tokens not given: 20 tokens per parameter (1.61e+11), Chinchilla-optimal" in result.notes


def test_a_train_request_that_names_its_batch_and_tokens_gets_no_note_of_them(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    request = TrainEstimateRequest(
        preset("gpt2"), catalog.accelerator("h100"), 8, Parallelism(), seq_len=1024, global_batch=64, tokens=1e9
    )
    result = estimate_train_request(request, catalog, assumptions)
    assert (result.parallelism.dp, result.job.global_batch, result.job.tokens) == (8, 64, 1e9)
    assert not [note for note in result.notes if "global batch" in note or "--tokens" in note]


@pytest.mark.parametrize(("gpus", "global_batch", "micro_batch"), [(1, None, 256), (8, None, 32), (4, 3000, 250)])
def test_an_image_model_trains_its_share_of_the_batch_at_once(
    catalog: Catalog, assumptions: Assumptions, gpus: int, global_batch: int | None, micro_batch: int
) -> None:
    """A micro-batch of one image (the language models' default) left ResNet-50 at 51 images/s on an A100,
    waiting for its host; an image model's default is its share of the global batch, at most 256."""
    request = TrainEstimateRequest(
        preset("resnet-50"), catalog.accelerator("a100-80gb"), gpus, Parallelism(), seq_len=1, global_batch=global_batch
    )
    result = estimate_train_request(request, catalog, assumptions)
    assert result.job.micro_batch == micro_batch
    assert any(note.startswith(f"micro-batch {micro_batch} images per device") for note in result.notes)
    assert result.tokens_per_second > 2000  # NVIDIA publishes 2,470 images/s per A100 at 256 (bf16)
    # No Chinchilla law for a CNN: 90 epochs of ImageNet-1k, not 20 images per parameter (511M).
    assert result.job.tokens == 90 * 1_281_167
    assert "--tokens not given: 90 epochs of ImageNet-1k (1.15e+08 images), the ResNet recipe" in result.notes
    language = TrainEstimateRequest(preset("gpt2"), catalog.accelerator("a100-80gb"), gpus, Parallelism(), seq_len=1024)
    assert estimate_train_request(language, catalog, assumptions).job.micro_batch == 1


def test_a_default_image_micro_batch_too_large_for_the_device_is_halved_until_it_fits(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """ViT-B/16 at 256 images needs about 20 GiB; a 16 GB T4 gets 128, and a micro-batch the user names is kept."""
    t4 = catalog.accelerator("t4")
    request = TrainEstimateRequest(preset("vit-b-16"), t4, 1, Parallelism(), seq_len=197)
    result = estimate_train_request(request, catalog, assumptions)
    assert (result.job.micro_batch, result.fits) == (128, True)
    assert any(note.startswith("micro-batch 128 images per device") for note in result.notes)
    named = estimate_train_request(replace(request, micro_batch=256), catalog, assumptions)
    assert (named.job.micro_batch, named.fits) == (256, False)


def test_a_split_that_does_not_divide_the_gpus_is_refused(catalog: Catalog, assumptions: Assumptions) -> None:
    request = TrainEstimateRequest(preset("gpt2"), catalog.accelerator("h100"), 6, Parallelism(tp=4), seq_len=1024)
    with pytest.raises(InputError, match=r"tp\*pp\*cp = 4 does not divide --gpus 6") as refused:
        estimate_train_request(request, catalog, assumptions)
    assert refused.value.hint == "choose --tp, --pp and --cp whose product divides --gpus"


def test_an_infer_request_takes_the_shape_of_its_kind_of_model(catalog: Catalog, assumptions: Assumptions) -> None:
    t4 = catalog.accelerator("t4")
    decoder = estimate_infer_request(InferEstimateRequest(preset("gpt2"), t4, kv_precision="fp8"), catalog, assumptions)
    # GPT-2 has 1024 positions: the default prompt leaves room for the 256 tokens it generates.
    assert (decoder.job.context_len, decoder.job.output_len, decoder.job.kv_cache_bytes_per_value) == (768, 256, 1.0)
    assert not [note for note in decoder.notes if "positions" in note]
    llama = estimate_infer_request(InferEstimateRequest(preset("llama-3-8b"), t4), catalog, assumptions)
    assert (llama.job.context_len, llama.job.output_len) == (1024, 256)
    assert decoder.job.precision == "fp16"  # a T4 has no bf16
    encoder = estimate_infer_request(InferEstimateRequest(preset("bert-base"), t4), catalog, assumptions)
    assert (encoder.job.context_len, encoder.job.output_len) == (512, 0)  # BERT's max_position_embeddings


def test_an_infer_request_refuses_an_output_for_a_model_that_generates_nothing(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    request = InferEstimateRequest(preset("resnet-50"), catalog.accelerator("t4"), output_len=16)
    with pytest.raises(InputError, match="generates no tokens, so --output-len does not apply"):
        estimate_infer_request(request, catalog, assumptions)


def test_a_sequence_beyond_the_models_positions_is_estimated_with_a_note(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    h100 = catalog.accelerator("h100")
    train = TrainEstimateRequest(preset("gpt2"), h100, 1, Parallelism(), seq_len=100_000, global_batch=1, tokens=1e9)
    notes = estimate_train_request(train, catalog, assumptions).notes
    assert any(note.startswith("--seq-len 100,000 exceeds the 1,024 positions gpt2 was built for") for note in notes)
    infer = InferEstimateRequest(preset("bert-base"), h100, input_len=100_000)
    notes = estimate_infer_request(infer, catalog, assumptions).notes
    assert any(note.startswith("a 100,000-token input exceeds the 512 positions") for note in notes)


def test_a_model_too_large_for_the_default_length_asks_for_tokens(catalog: Catalog, assumptions: Assumptions) -> None:
    """20 tokens per parameter of 1e14 parameters is 2e15 tokens, over --tokens' range: the error names the
    default that made it, not a flag the user never gave."""
    request = TrainEstimateRequest(from_param_count(1e14), catalog.accelerator("h100"), 1, Parallelism(), seq_len=2048)
    with pytest.raises(InputError, match="--tokens not given, and 20 tokens per parameter") as error:
        estimate_train_request(request, catalog, assumptions)
    assert "give --tokens" in error.value.hint


def test_tokens_short_of_one_step_are_timed_as_one_step_and_said_so(catalog: Catalog, assumptions: Assumptions) -> None:
    request = TrainEstimateRequest(
        preset("gpt2"), catalog.accelerator("h100"), 1, Parallelism(), seq_len=1024, global_batch=8, tokens=100
    )
    result = estimate_train_request(request, catalog, assumptions)
    assert result.columns.steps == 1
    assert any(note.startswith("100 tokens are less than one optimizer step (8,192:") for note in result.notes)
