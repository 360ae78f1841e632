"""The search space: device defaults, --space parsing, contradictions named, model-dependent narrowing."""

from __future__ import annotations

import pytest

from computewise.errors import SpaceError
from computewise.system.hardware import Hardware
from computewise.train.config import TrainConfig
from computewise.tune.space import ModelFacts, default_space, parse_space

PLAIN_CPU = Hardware(cpu="test cpu", cpu_flags=frozenset({"avx2"}), threads=8)
BF16_CPU = Hardware(cpu="test cpu", cpu_flags=frozenset({"avx2", "avx512_bf16"}), threads=2)
GPT = ModelFacts(has_convolutions=False, has_blocks=True, global_batch_size=32)
CNN = ModelFacts(has_convolutions=True, has_blocks=False, global_batch_size=64)


def test_cpu_defaults_try_bf16_only_where_the_cpu_computes_it_natively() -> None:
    assert default_space("cpu", PLAIN_CPU).precisions == ("fp32",)
    assert default_space("cpu", BF16_CPU).precisions == ("fp32", "bf16")


def test_gpu_defaults_follow_the_compute_capability() -> None:
    assert default_space("cuda", PLAIN_CPU, cuda_capability=(9, 0)).precisions == ("fp32", "tf32", "bf16", "fp16")
    assert default_space("cuda", PLAIN_CPU, cuda_capability=(7, 0)).precisions == ("fp32", "fp16")


def test_loader_workers_default_to_half_the_cpus_at_most_four() -> None:
    assert default_space("cpu", PLAIN_CPU).loader_workers == (0, 4)
    assert default_space("cpu", BF16_CPU).loader_workers == (0, 1)
    assert default_space("cpu", Hardware(cpu="x", cpu_flags=frozenset(), threads=1)).loader_workers == (0,)


def test_default_micro_batches_are_the_largest_power_of_two_divisors() -> None:
    space = default_space("cpu", PLAIN_CPU)
    assert space.micro_choices(32) == (1, 2, 4, 8, 16, 32)
    assert space.micro_choices(512) == (16, 32, 64, 128, 256, 512)
    assert space.micro_choices(48) == (1, 2, 4, 8, 16, 48)  # the whole batch is always a choice


def test_parse_replaces_only_the_named_dimensions() -> None:
    space = parse_space(
        "precision=fp32,bf16; micro=8,16,32 ;compile=on,off;ckpt=off;fused=yes", default_space("cpu", PLAIN_CPU)
    )
    assert space.precisions == ("fp32", "bf16")
    assert space.micro_batch_sizes == (8, 16, 32)
    assert space.compile == (True, False)
    assert space.activation_checkpointing == (False,)
    assert space.fused_optimizer == (True,)
    assert space.loader_workers == (0, 4)  # untouched
    assert parse_space(None, space) is space


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("precision=fp16", "fp16"),
        ("precision=fp32,tf32", "tf32"),
        ("precision=fp64", "fp64"),
        ("speed=fast", "speed=fast"),
        ("micro", "micro"),
        ("micro=8;micro=16", "micro twice"),
        ("micro=eight", "micro=eight"),
        ("micro=0", ">= 1"),
        ("workers=-1", ">= 0"),
        ("compile=maybe", "compile=maybe"),
        ("fused=", "no value for fused"),
    ],
)
def test_malformed_or_contradictory_parts_are_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space(text, default_space("cpu", PLAIN_CPU))
    assert named in caught.value.message
    assert caught.value.hint


def test_gpu_precisions_are_fine_on_a_gpu() -> None:
    space = parse_space("precision=fp16,tf32", default_space("cuda", PLAIN_CPU, cuda_capability=(8, 0)))
    assert space.precisions == ("fp16", "tf32")


def test_micro_batches_that_do_not_divide_the_global_batch() -> None:
    space = parse_space("micro=5,8,12", default_space("cpu", PLAIN_CPU)).for_model(GPT)
    assert space.micro_choices(32) == (8,)
    assert any("micro=5,12 dropped" in note for note in space.notes)
    with pytest.raises(SpaceError) as caught:
        parse_space("micro=5,7", default_space("cpu", PLAIN_CPU)).for_model(GPT)
    assert "none of them divides" in caught.value.message and "1,2,4,8,16,32" in (caught.value.hint or "")


def test_forcing_what_the_model_cannot_run_is_a_contradiction() -> None:
    with pytest.raises(SpaceError, match="channels_last=on contradicts the model"):
        parse_space("channels_last=on", default_space("cpu", PLAIN_CPU)).for_model(GPT)
    with pytest.raises(SpaceError, match="checkpointing=on contradicts the model"):
        parse_space("checkpointing=on", default_space("cpu", PLAIN_CPU)).for_model(CNN)


def test_impossible_choices_are_dropped_with_a_note_when_others_remain() -> None:
    gpt = default_space("cpu", PLAIN_CPU).for_model(GPT)
    assert gpt.channels_last == (False,) and gpt.activation_checkpointing == (False, True)
    cnn = default_space("cpu", PLAIN_CPU).for_model(CNN)
    assert cnn.activation_checkpointing == (False,) and cnn.channels_last == (False, True)
    assert any("channels_last=on dropped" in note for note in gpt.notes)


def test_configs_enumerate_every_combination_as_runnable_configs() -> None:
    space = parse_space(
        "precision=fp32,bf16;micro=16,32;ckpt=off;compile=off;channels_last=off;workers=0,2;fused=off",
        default_space("cuda", PLAIN_CPU, cuda_capability=(9, 0)),
    )
    configs = space.configs(32)
    assert len(configs) == 2 * 2 * 2
    assert len(set(configs)) == len(configs)
    with_workers = [c for c in configs if c.loader_workers == 2]
    assert all(c.persistent_workers and c.pin_memory for c in with_workers)
    assert TrainConfig(precision="bf16", micro_batch_size=16, pin_memory=True) in configs
    assert all(c.accumulation_steps(32) in (1, 2) for c in configs)


def test_a_gpu_searches_cuda_graphs_and_max_autotune_and_a_cpu_says_why_it_does_not() -> None:
    gpu = default_space("cuda", PLAIN_CPU, cuda_capability=(9, 0))
    assert gpu.compile_modes == ("default", "reduce-overhead", "max-autotune")
    cpu = default_space("cpu", PLAIN_CPU)
    assert cpu.compile_modes == ("default",)
    assert any(note.startswith("TF32 skipped: it is a mode of NVIDIA GPUs") for note in cpu.notes)
    assert any(
        "reduce-overhead and max-autotune skipped: CUDA graphs are recorded on NVIDIA GPUs" in n for n in cpu.notes
    )
    # The loss is the setup's own: the search says what it knows about fusing it, on either device,
    # and tries compiling it with the model (the grid does not; the winner does) on both.
    assert any(note.startswith("fused linear + cross-entropy not") for note in cpu.notes + gpu.notes)
    assert gpu.compile_loss == cpu.compile_loss == (False, True)


def test_compile_loss_is_a_dimension_whose_first_choice_the_compiled_grid_takes() -> None:
    space = parse_space("compile=off,on;loss=on", default_space("cpu", PLAIN_CPU))
    assert space.compile_loss == (True,)
    configs = space.configs(32)
    assert {c.compile_loss for c in configs if c.compile} == {True}
    assert {c.compile_loss for c in configs if not c.compile} == {False}  # nothing to compile it with
    assert parse_space("compile_loss=off", default_space("cpu", PLAIN_CPU)).compile_loss == (False,)
    with pytest.raises(SpaceError, match="compile_loss=maybe is not on or off"):
        parse_space("compile_loss=maybe", default_space("cpu", PLAIN_CPU))


def test_compile_modes_are_named_in_the_compile_dimension_and_the_grid_compiles_in_the_first() -> None:
    space = parse_space("compile=off,reduce-overhead,max-autotune", default_space("cuda", PLAIN_CPU))
    assert space.compile == (False, True) and space.compile_modes == ("reduce-overhead", "max-autotune")
    compiled = [config for config in space.configs(32) if config.compile]
    assert compiled and {config.compile_mode for config in compiled} == {"reduce-overhead"}
    assert parse_space("compile=on", default_space("cuda", PLAIN_CPU)).compile_modes == ("default",)
    with pytest.raises(SpaceError, match=r"compile=fast is not on, off or a torch\.compile mode"):
        parse_space("compile=fast", default_space("cuda", PLAIN_CPU))


def test_cuda_graph_modes_on_a_cpu_are_skipped_with_the_reason_or_refused_when_nothing_else_is_left() -> None:
    space = parse_space("compile=off,on,reduce-overhead", default_space("cpu", PLAIN_CPU))
    assert space.compile == (False, True) and space.compile_modes == ("default",)
    assert "compile=reduce-overhead skipped: CUDA graphs are recorded on NVIDIA GPUs only" in space.notes
    only_off = parse_space("compile=off,max-autotune", default_space("cpu", PLAIN_CPU))
    assert only_off.compile == (False,)
    with pytest.raises(SpaceError, match="compile=reduce-overhead contradicts the device") as refused:
        parse_space("compile=reduce-overhead", default_space("cpu", PLAIN_CPU))
    assert refused.value.hint == "use compile=on (or max-autotune-no-cudagraphs) on a CPU"
    assert parse_space("compile=max-autotune-no-cudagraphs", default_space("cpu", PLAIN_CPU)).compile == (True,)
