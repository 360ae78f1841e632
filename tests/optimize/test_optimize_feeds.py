"""Feeds on real inputs: MiniLM's tokenizer over examples/sentences.txt, arrays, text and JSON Lines files.

Text batches must be padded to their own longest sentence and length-sorted batching must give
back every example once, in its own place: a mix-up there would grade one sentence against
another's reference and no later check would notice.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from computewise.errors import InputError
from computewise.optimize.feeds import TensorFeed, TextFeed, batches_of, read_texts, split_indices
from computewise.optimize.predictors import TorchPredictor, predict_all
from computewise.optimize.source import ModelSource


def _text_feed(source: ModelSource) -> TextFeed:
    assert isinstance(source.feed, TextFeed)
    return source.feed


@pytest.mark.torch
def test_minilm_feed_reads_every_sentence_and_names_its_inputs(minilm_source: ModelSource) -> None:
    feed = _text_feed(minilm_source)
    assert len(feed) == 400
    assert feed.input_names == ("input_ids", "attention_mask", "token_type_ids")
    lengths = feed.lengths()
    assert lengths.shape == (400,)
    assert lengths.min() >= 3  # [CLS] word [SEP] at the least
    assert lengths.max() > 2 * lengths.min()  # mixed lengths, so sorting has something to do


@pytest.mark.torch
def test_text_batch_pads_to_the_longest_sentence_in_the_batch(minilm_source: ModelSource) -> None:
    feed = _text_feed(minilm_source)
    lengths = feed.lengths()
    shortest, longest = int(lengths.argmin()), int(lengths.argmax())
    alone = feed.batch([shortest])
    assert alone["input_ids"].shape == (1, lengths[shortest])
    mixed = feed.batch([shortest, longest])
    assert {array.shape for array in mixed.values()} == {(2, lengths[longest])}
    assert mixed["attention_mask"].sum(axis=1).tolist() == [lengths[shortest], lengths[longest]]
    assert mixed["input_ids"][0, lengths[shortest] :].tolist() == [0] * (lengths[longest] - lengths[shortest])
    assert all(array.dtype == np.int64 for array in mixed.values())


@pytest.mark.torch
def test_length_sorted_batches_group_similar_lengths_and_cover_every_index_once(minilm_source: ModelSource) -> None:
    feed = _text_feed(minilm_source)
    lengths = feed.lengths()
    batches = batches_of(feed, 32, by_length=True)
    flat = [index for batch in batches for index in batch]
    assert sorted(flat) == list(range(len(feed)))
    assert [len(batch) for batch in batches] == [32] * 12 + [16]
    for before, after in itertools.pairwise(batches):
        assert lengths[before].max() <= lengths[after].min()

    def padded_tokens(groups: list[list[int]]) -> int:
        return sum(len(group) * int(lengths[group].max()) for group in groups)

    arrival = batches_of(feed, 32, by_length=False)
    assert [index for batch in arrival for index in batch] == list(range(len(feed)))
    assert padded_tokens(batches) < 0.8 * padded_tokens(arrival)


def test_tensor_feed_keeps_arrival_order_even_when_sorting_is_asked_for() -> None:
    feed = TensorFeed({"x": np.arange(10, dtype=np.float32)[::-1].reshape(10, 1).copy()})
    assert feed.lengths() is None
    assert batches_of(feed, 4, by_length=True) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.torch
def test_predict_all_returns_outputs_in_the_original_order_whatever_the_batching(
    minilm_source: ModelSource,
) -> None:
    feed = _text_feed(minilm_source)
    order = np.argsort(feed.lengths(), kind="stable")
    # shortest and longest sentences interleaved, so sorting by length really reorders them
    picked = [int(i) for pair in zip(order[:6], order[::-1][:6], strict=True) for i in pair]
    sample = feed.subset(picked)
    predictor = TorchPredictor(minilm_source.module, positional=False)
    sorted_outputs = predict_all(predictor, sample, 4, by_length=True)
    arrival_outputs = predict_all(predictor, sample, 4, by_length=False)
    assert sorted_outputs.shape == (12, 384)
    np.testing.assert_allclose(sorted_outputs, arrival_outputs, atol=1e-4)
    for position in (0, 1, 11):
        alone = predictor(sample.batch([position]))[0]
        np.testing.assert_allclose(sorted_outputs[position], alone, atol=1e-4)
    # the sentence-transformers config ends in Normalize: unit vectors
    np.testing.assert_allclose(np.linalg.norm(sorted_outputs, axis=1), 1.0, atol=1e-5)


def test_split_indices_is_disjoint_complete_and_deterministic() -> None:
    calibration, held_aside = split_indices(400, 0.25)
    assert len(calibration) == 100
    assert len(held_aside) == 300
    assert not set(calibration) & set(held_aside)
    assert sorted(calibration + held_aside) == list(range(400))
    assert calibration == sorted(calibration)
    assert split_indices(400, 0.25) == (calibration, held_aside)
    assert split_indices(400, 0.25, seed=1)[0] != calibration
    assert calibration != list(range(100))  # shuffled, not the first quarter of the file


@pytest.mark.parametrize(("count", "fraction", "sizes"), [(2, 0.25, (1, 1)), (10, 0.0, (1, 9)), (10, 1.0, (9, 1))])
def test_split_indices_leaves_at_least_one_example_on_each_side(
    count: int, fraction: float, sizes: tuple[int, int]
) -> None:
    calibration, held_aside = split_indices(count, fraction)
    assert (len(calibration), len(held_aside)) == sizes
    assert sorted(calibration + held_aside) == list(range(count))


def test_tensor_feed_batches_subsets_and_takes_the_users_arrays() -> None:
    images = np.arange(40, dtype=np.float32).reshape(10, 4)
    feed = TensorFeed({"x": images})
    assert feed.input_names == ("x",)
    np.testing.assert_array_equal(feed.batch([3, 1])["x"], images[[3, 1]])
    assert len(feed.subset([2, 5, 7])) == 3
    like = feed.like([[1, 2, 3, 4]])  # a plain list of int rows becomes the model's float32
    assert like.arrays["x"].dtype == np.float32
    assert like.arrays["x"].shape == (1, 4)


def test_tensor_feed_like_rejects_the_wrong_example_shape() -> None:
    feed = TensorFeed({"x": np.zeros((10, 64), dtype=np.float32)})
    with pytest.raises(InputError, match=r"'x' has example shape \(8,\), the model takes \(64,\)"):
        feed.like(np.zeros((3, 8), dtype=np.float32))


def test_tensor_feed_like_needs_a_dict_for_several_inputs() -> None:
    feed = TensorFeed({"a": np.zeros((10, 2)), "b": np.zeros((10, 3))})
    with pytest.raises(InputError, match="a dict of arrays named a, b"):
        feed.like(np.zeros((1, 2)))
    both = feed.like({"a": np.ones((2, 2)), "b": np.ones((2, 3))})
    assert len(both) == 2


def test_text_feed_like_takes_a_list_of_strings_only() -> None:
    feed = TextFeed(("a b", "c"), lambda texts: {"input_ids": np.zeros((len(texts), 1))}, ("input_ids",))
    assert feed.like(["x", "y", "z"]).texts == ("x", "y", "z")
    with pytest.raises(InputError, match="list of strings"):
        feed.like("one sentence")
    with pytest.raises(InputError, match="list of strings"):
        feed.like(["fine", 3])


def test_read_texts_skips_blank_lines_and_strips(tmp_path: Path) -> None:
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(f"  sentence {i}  \n" for i in range(9)))
    assert read_texts(path) == tuple(f"sentence {i}" for i in range(9))


def test_read_texts_needs_eight_sentences(tmp_path: Path) -> None:
    path = tmp_path / "few.txt"
    path.write_text("one\ntwo\n\nthree\n")
    with pytest.raises(InputError, match="holds 3 sentences; the search needs at least 8"):
        read_texts(path)


def test_read_texts_reads_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "inputs.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"row {i}", "label": i}) for i in range(8)) + "\n\n")
    assert read_texts(path) == tuple(f"row {i}" for i in range(8))


def test_read_texts_names_the_json_line_without_a_text_field(tmp_path: Path) -> None:
    path = tmp_path / "inputs.jsonl"
    lines = [json.dumps({"text": f"row {i}"}) for i in range(10)]
    lines[3] = json.dumps({"sentence": "wrong key"})
    path.write_text("\n".join(lines))
    with pytest.raises(InputError, match=r"inputs\.jsonl:4: not a JSON object with a 'text' field"):
        read_texts(path)


def test_read_texts_rejects_lines_that_are_not_json(tmp_path: Path) -> None:
    path = tmp_path / "inputs.jsonl"
    path.write_text('{"text": "ok"}\nnot json at all\n')
    with pytest.raises(InputError, match=r"inputs\.jsonl:2:"):
        read_texts(path)


def test_read_texts_reports_an_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    with pytest.raises(InputError, match="cannot read inputs"):
        read_texts(missing)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1") * 10)
    with pytest.raises(InputError, match="UTF-8"):
        read_texts(latin)
